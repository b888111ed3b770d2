"""Text encoders (BERT-like)."""

from .registry import (
    FFN,
    HEADS,
    HIDDEN,
    LAYERS,
    POSITIONS,
    VOCAB,
    arch,
    text,
)


def bert_like(**extra):
    return dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FFN,
        max_position_embeddings=POSITIONS,
        **extra,
    )


@arch("bert", "encoder", "absolute positions, token types", "BertModel", text)
def bert():
    import transformers

    return transformers.BertConfig(**bert_like())


@arch("roberta", "encoder", "positions from the padding mask", "RobertaModel", text)
def roberta():
    import transformers

    return transformers.RobertaConfig(**bert_like(pad_token_id=1))


@arch("distilbert", "encoder", "no token types", "DistilBertModel", text)
def distilbert():
    import transformers

    return transformers.DistilBertConfig(
        vocab_size=VOCAB,
        dim=HIDDEN,
        n_layers=LAYERS,
        n_heads=HEADS,
        hidden_dim=FFN,
        max_position_embeddings=POSITIONS,
    )


@arch("albert", "encoder", "shared layers, factorized embeddings", "AlbertModel", text)
def albert():
    import transformers

    return transformers.AlbertConfig(**bert_like(embedding_size=16))


@arch("electra", "encoder", "embedding projection", "ElectraModel", text)
def electra():
    import transformers

    return transformers.ElectraConfig(**bert_like(embedding_size=16))


@arch("deberta_v2", "encoder", "disentangled relative attention", "DebertaV2Model", text)
def deberta_v2():
    import transformers

    return transformers.DebertaV2Config(
        **bert_like(
            relative_attention=True,
            position_buckets=16,
            pos_att_type=["p2c", "c2p"],
            max_relative_positions=32,
        )
    )


@arch("mpnet", "encoder", "relative position bias", "MPNetModel", text)
def mpnet():
    import transformers

    return transformers.MPNetConfig(**bert_like(pad_token_id=1))
