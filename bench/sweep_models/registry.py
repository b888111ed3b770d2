"""What an architecture of the sweep is (`Arch`), the registry every family module
adds to (`ARCHS`, `@arch`), the sizes, and the input makers the families share."""

import dataclasses

# Size A (every export is traced with it) and size B (the second check of a
# dynamic export: another batch and another sequence, frame or image size).
SIZE_A = (2, 8)
SIZE_B = (3, 13)
SEED = 0

# Tiny text sizes shared by the decoder LMs and encoders.
VOCAB = 128
HIDDEN = 32
HEADS = 4
KV_HEADS = 2
FFN = 64
LAYERS = 2
POSITIONS = 64


@dataclasses.dataclass
class Arch:
    name: str
    category: str  # decoder, encoder, encoder-decoder, vision, audio, multimodal
    feature: str  # what the architecture brings to the sweep (ALiBi, MoE, ...)
    model_class: str  # a transformers class
    config: callable  # () -> a transformers config
    make_inputs: callable  # (model, batch, seq, generator) -> dict of tensors
    # Whether size B may change more than the batch (False: image/frame size fixed by the model).
    vary_length: bool = True
    # Why the check's eager reference runs transformers' eager attention instead of its default (SDPA), when
    # the default's eager path computes something else than the model does when traced; None: the default.
    eager_attention: str | None = None

    def model(self):
        import torch
        import transformers

        torch.manual_seed(SEED)
        return getattr(transformers, self.model_class)(self.config()).eval()

    def inputs(self, model, batch, seq):
        import torch

        generator = torch.Generator().manual_seed(SEED + 1000 * batch + seq)
        return self.make_inputs(model, batch, seq, generator)

    def build(self):
        model = self.model()
        return model, self.inputs(model, *SIZE_A)

    def size_b(self):
        return SIZE_B if self.vary_length else (SIZE_B[0], SIZE_A[1])


ARCHS = {}


def arch(name, category, feature, model_class, inputs, vary_length=True, eager_attention=None):
    """Registers `config` (the decorated function) as architecture `name`."""

    def register(config):
        ARCHS[name] = Arch(
            name, category, feature, model_class, config, inputs, vary_length, eager_attention
        )
        return config

    return register


# ── Inputs ──


def text(model, batch, seq, generator, low=3):
    """input_ids (ids below `low` are left to special tokens) + an all-ones attention_mask."""
    import torch

    vocab = model.config.get_text_config().vocab_size
    ids = torch.randint(low, vocab, (batch, seq), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones(batch, seq, dtype=torch.long)}


def text_ids_only(model, batch, seq, generator):
    """input_ids only (state-space models take no attention mask)."""
    return {"input_ids": text(model, batch, seq, generator)["input_ids"]}


def decoder_ids(model, batch, seq, generator):
    """decoder_input_ids: a target shorter than the source (seq - 2), starting with the decoder's start token."""
    import torch

    start = model.config.decoder_start_token_id
    target = torch.randint(3, model.config.vocab_size, (batch, seq - 2), generator=generator)
    target[:, 0] = start if start is not None else 0
    return target


def seq2seq(model, batch, seq, generator):
    """Encoder input_ids + mask, and decoder_input_ids."""
    inputs = text(model, batch, seq, generator)
    inputs["decoder_input_ids"] = decoder_ids(model, batch, seq, generator)
    return inputs


def pixels(model, batch, seq, generator, size=None, channels=None):
    """pixel_values; `seq` picks the image side where the architecture allows several (32 or 48)."""
    import torch

    config = model.config
    config = getattr(config, "vision_config", config)
    side = size or (32 if seq == SIZE_A[1] else 48)
    channels = channels or getattr(config, "num_channels", 3)
    return {"pixel_values": torch.randn(batch, channels, side, side, generator=generator)}


def fixed_pixels(model, batch, seq, generator):
    config = getattr(model.config, "vision_config", model.config)
    return pixels(model, batch, seq, generator, size=config.image_size)


def mel_and_decoder(model, batch, seq, generator):
    """Whisper: log-mel frames (2 x max_source_positions, fixed by the model) + decoder_input_ids."""
    import torch

    config = model.config
    frames = 2 * config.max_source_positions
    features = torch.randn(batch, config.num_mel_bins, frames, generator=generator)
    return {
        "input_features": features,
        "decoder_input_ids": decoder_ids(model, batch, seq, generator),
    }


def waveform(model, batch, seq, generator):
    """Raw audio: 400 samples at size A, 640 at size B (seq x 40 + 80)."""
    import torch

    return {"input_values": torch.randn(batch, 40 * seq + 80, generator=generator)}


def text_and_image(model, batch, seq, generator):
    """CLIP / SigLIP: input_ids (+ mask for CLIP) and pixel_values at the model's image size."""
    inputs = text(model, batch, seq, generator)
    if model.config.model_type == "siglip":
        inputs.pop("attention_mask")  # SigLIP is trained on padded text without a mask
    inputs.update(fixed_pixels(model, batch, seq, generator))
    return inputs


def image_then_text(model, batch, seq, generator):
    """A VLM prompt: the image's tokens first (as many as the vision tower yields), then `seq` text tokens."""
    import torch

    config = model.config
    image_token = config.image_token_id
    vision = config.vision_config
    patches = (vision.image_size // vision.patch_size) ** 2
    words = torch.randint(3, image_token, (batch, seq), generator=generator)
    ids = torch.cat([torch.full((batch, patches), image_token, dtype=torch.long), words], dim=1)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    inputs.update(fixed_pixels(model, batch, seq, generator))
    return inputs
