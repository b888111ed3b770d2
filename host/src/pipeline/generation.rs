//! The generation check (`--generation --verify`): greedy decoding through
//! the exported components, each in its backend's runtime, against
//! `model.generate` in eager. The worker drives it (`hfx_worker/generation.py`:
//! transformers' own `generate` loop with the model's forward replaced by the
//! components), so every architecture gets the kwargs its generation builds;
//! identical tokens at every step are required, and every step's logits
//! within the backend's tolerance. Quantized components are checked teacher
//! forced (each step fed eager's token): every step's logits are compared in
//! eager's context, and a near-tie flipped costs that one token, not the rest
//! of its row. This is the generation export's
//! verification: each component's own outputs are checked through the steps
//! that read them (a component's cache output may differ from eager's by
//! design: a sliding-window layer traced whole, its window applied by the mask).

use std::time::Duration;

use anyhow::{bail, Result};

#[cfg(test)]
use crate::trace::protocol::FloatStep;
use crate::trace::protocol::{
    GenerateCheck, GenerateCheckReply, GenerateStep, Int4RoundTrip, VerifyModel,
};
use crate::trace::Worker;

/// The share of greedy tokens a quantized model's components must choose as
/// eager does, each step given eager's tokens before it (teacher forced):
/// rounding every weight to 16 levels moves the logits by up to a half of
/// their range (`verify::INT4`), enough to flip a near-tie; a tiny random
/// Llama, whose logits are all near-ties, keeps 15 of 16. int8, 16 times
/// finer, is held to the same floor.
pub const INT4_AGREEMENT: f64 = 0.5;

/// A generation check's result, and what it was held to ([`held_to`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    pub reply: GenerateCheckReply,
    pub tolerance: String,
}

/// What the check holds components to, as the summary states it: of a
/// `scheme`'s quantized components, each step's logits within `tolerance` of
/// its largest eager logit and the agreement floor; else atol/rtol and
/// identical tokens.
pub fn held_to(tolerance: f64, scheme: Option<&str>, round_trip: bool) -> String {
    match scheme {
        Some(scheme) if round_trip => format!(
            "{scheme} tolerance: each step's logits within {tolerance} x its largest eager {scheme} logit, \
             greedy-token agreement at least {INT4_AGREEMENT}, each step given eager's tokens before it \
             (eager {scheme}: the model with the components' {scheme} weights, dequantized)"
        ),
        Some(scheme) => format!(
            "{scheme} tolerance: each step's logits within {tolerance} x its largest eager logit, \
             greedy-token agreement at least {INT4_AGREEMENT}, each step given eager's tokens before it"
        ),
        None => format!("atol/rtol {tolerance:e} on each step's logits, identical greedy tokens"),
    }
}

/// Runs the check over the exported `components` (each one's name and
/// artifact); tokens that differ anywhere are an error naming the first
/// step. `quantized` components (the scheme's name) are checked teacher
/// forced: the greedy-token agreement must reach [`INT4_AGREEMENT`], and
/// every step's logits be within `tolerance` of its largest eager logit.
/// `int4`: the int4 components' weights, which eager round-trips.
pub fn check(
    worker: &mut Worker,
    components: std::collections::BTreeMap<String, VerifyModel>,
    steps: u32,
    (tolerance, scheme): (f64, Option<&str>),
    int4: Option<Int4RoundTrip>,
    genai: Option<std::path::PathBuf>,
    deadline: Duration,
) -> Result<Checked> {
    let held = held_to(tolerance, scheme, int4.is_some());
    let print = |reply: &GenerateCheckReply| print(reply, &held);
    let quantized = scheme.is_some();
    let scheme = scheme.unwrap_or_default();
    let rtol = if quantized { 0.0 } else { tolerance };
    let request = GenerateCheck {
        components,
        steps,
        atol: tolerance,
        rtol,
        atol_of_max: quantized,
        genai,
        int4,
        teacher_forced: quantized,
    };
    let reply = worker.request(&request, deadline)?;
    // GenAI runs the package's own decoder: held to what its components are.
    if let Some(genai) = &reply.genai {
        let (agreed, total) = row_agreement(&genai.tokens, &genai.eager_tokens);
        if quantized && (agreed as f64) < INT4_AGREEMENT * total as f64 {
            print(&reply);
            bail!("--verify: ONNX Runtime GenAI's `Generator` over the {scheme} package chooses eager's greedy tokens {agreed} of {total} times, below the {INT4_AGREEMENT} agreement {scheme} is held to; nothing was written");
        }
        if !quantized && !genai.identical {
            print(&reply);
            let at = match genai.tokens.iter().zip(&genai.eager_tokens).position(|(g, w)| g != w) {
                Some(row) => format!(
                    "from prompt row {} it generates {:?}, eager `generate` {:?}",
                    row + 1,
                    genai.tokens[row],
                    genai.eager_tokens[row]
                ),
                None => "it generated fewer rows than eager".into(),
            };
            bail!("--verify: ONNX Runtime GenAI's `Generator` over the package differs from eager `generate`: {at}; nothing was written");
        }
    }
    // A component generation never called is one the check did not verify.
    if let Some(unused) = reply.calls.iter().find(|c| c.calls == 0) {
        print(&reply);
        bail!("--verify: `generate` never called the exported `{}` component, so the generation check cannot vouch for it; nothing was written", unused.name);
    }
    if quantized {
        let (agreed, total) = agreement(&reply);
        if let Some((i, step)) = compared_steps(&reply).iter().enumerate().find(|(_, s)| !s.ok) {
            print(&reply);
            bail!(
                "--verify: the {scheme} components' logits of token {} differ by {} (beyond {tolerance} x the largest eager logit); nothing was written",
                i + 1,
                step.max_abs.map_or("a non-finite amount".into(), |e| format!("{e:.2e}"))
            );
        }
        if (agreed as f64) < INT4_AGREEMENT * total as f64 {
            print(&reply);
            bail!("--verify: the {scheme} components choose eager's greedy tokens {agreed} of {total} times, below the {INT4_AGREEMENT} agreement {scheme} is held to; nothing was written");
        }
        return Ok(Checked { reply, tolerance: held });
    }
    if reply.identical {
        if let Some((i, step)) = reply.steps.iter().enumerate().find(|(_, s)| !s.ok) {
            print(&reply);
            bail!(
                "--verify: the exported components generate eager's tokens, but the logits of token {} differ by {} (beyond atol/rtol {tolerance:e}); nothing was written",
                i + 1,
                step.max_abs.map_or("a non-finite amount".into(), |e| format!("{e:.2e}"))
            );
        }
    } else {
        print(&reply);
        let (step, first) = reply
            .steps
            .iter()
            .enumerate()
            .find(|(_, s)| s.tokens != s.eager_tokens)
            .map_or((reply.steps.len(), None), |(i, s)| (i, Some(s)));
        let at = match first {
            Some(GenerateStep { tokens, eager_tokens, max_abs, .. }) => format!(
                "at token {} the components chose {tokens:?}, eager {eager_tokens:?} (logits max abs error {})",
                step + 1,
                max_abs.map_or("not finite".into(), |e| format!("{e:.2e}"))
            ),
            None => "the components generated fewer tokens than eager".into(),
        };
        bail!("--verify: greedy generation through the exported components differs from eager `generate`: {at}; nothing was written");
    }
    Ok(Checked { reply, tolerance: held })
}

/// Greedy tokens the components chose as eager did, and the tokens eager
/// generated: teacher forced, at every step; else each row up to its first
/// difference (after it the contexts differ).
pub fn agreement(check: &GenerateCheckReply) -> (usize, usize) {
    let eager = by_row(check, |s| Some(&s.eager_tokens));
    counted(check, &by_row(check, |s| Some(&s.tokens)), &eager)
}

/// Of components eager round-tripped int4 weights for: greedy tokens they
/// chose as the float model did, given its tokens before each step.
pub fn float_agreement(check: &GenerateCheckReply) -> Option<(usize, usize)> {
    check.steps.first()?.against_float.as_ref()?;
    let float = by_row(check, |s| s.against_float.as_ref().map(|f| &f.float_tokens));
    let chosen = by_row(check, |s| s.against_float.as_ref().map(|f| &f.tokens));
    Some(counted(check, &chosen, &float))
}

/// `rows`' tokens equal to `reference`'s, counted as the check ran: teacher
/// forced, at every step; else each row up to its first difference.
fn counted(
    check: &GenerateCheckReply,
    rows: &[Vec<i64>],
    reference: &[Vec<i64>],
) -> (usize, usize) {
    if check.teacher_forced {
        step_agreement(rows, reference)
    } else {
        row_agreement(rows, reference)
    }
}

/// How [`counted`] counted, in the summary's words; `whose`: the tokens the
/// components were given.
fn how_counted(check: &GenerateCheckReply, whose: &str) -> String {
    if check.teacher_forced {
        format!("each step given {whose} tokens before it")
    } else {
        "each row up to its first difference".into()
    }
}

/// The steps whose logits were computed in eager's context: teacher forced,
/// all; else those before any row's first difference.
fn compared_steps(check: &GenerateCheckReply) -> &[GenerateStep] {
    if check.teacher_forced {
        return &check.steps;
    }
    let first_difference = check.steps.iter().position(|s| s.tokens != s.eager_tokens);
    &check.steps[..first_difference.unwrap_or(check.steps.len())]
}

/// The check's tokens `pick` gives, per row, in step order.
fn by_row(
    check: &GenerateCheckReply,
    pick: impl Fn(&GenerateStep) -> Option<&Vec<i64>>,
) -> Vec<Vec<i64>> {
    let rows = check.steps.first().map_or(0, |s| s.eager_tokens.len());
    (0..rows)
        .map(|row| {
            check.steps.iter().map_while(|s| pick(s).and_then(|t| t.get(row)).copied()).collect()
        })
        .collect()
}

/// Tokens of `rows` equal to eager's, each row counted up to its first
/// difference (after it the contexts differ), and the tokens eager generated.
fn row_agreement(rows: &[Vec<i64>], eager: &[Vec<i64>]) -> (usize, usize) {
    let agreed = eager
        .iter()
        .zip(rows)
        .map(|(eager, row)| row.iter().zip(eager).take_while(|(a, b)| a == b).count())
        .sum();
    (agreed, eager.iter().map(Vec::len).sum())
}

/// Tokens of `rows` equal to eager's at the same step, every step in eager's
/// context, and the tokens eager generated.
fn step_agreement(rows: &[Vec<i64>], eager: &[Vec<i64>]) -> (usize, usize) {
    let agreed = eager
        .iter()
        .zip(rows)
        .map(|(eager, row)| row.iter().zip(eager).filter(|(a, b)| a == b).count())
        .sum();
    (agreed, eager.iter().map(Vec::len).sum())
}

/// Prints the check's lines ([`write`]) on stdout.
pub fn print(check: &GenerateCheckReply, tolerance: &str) {
    let mut out = String::new();
    write(&mut out, check, tolerance).expect("writing to a String");
    print!("{out}");
}

/// The check's lines: a line for the whole, one per token.
pub fn write(
    out: &mut impl std::fmt::Write,
    check: &GenerateCheckReply,
    tolerance: &str,
) -> std::fmt::Result {
    let worst = check.steps.iter().filter_map(|s| s.max_abs).fold(0.0_f64, f64::max);
    let calls: Vec<String> = check
        .calls
        .iter()
        .map(|c| match c.state_loads {
            Some(loads) => format!("{} {} (cache loaded into its state {loads})", c.name, c.calls),
            None => format!("{} {}", c.name, c.calls),
        })
        .collect();
    writeln!(out,
        "generate {} greedy token(s) x {} row(s){}: {} eager `generate` (component calls: {}; logits max abs error {worst:.2e}; {})",
        check.steps.len(),
        check.steps.first().map_or(0, |s| s.eager_tokens.len()),
        if check.teacher_forced { ", each step given eager's tokens before it" } else { "" },
        if check.identical { "identical to" } else { "DIFFERENT from" },
        calls.join(", "),
        check.providers.join(", ")
    )?;
    writeln!(out, "  held to: {tolerance}")?;
    if let Some((agreed, total)) = float_agreement(check) {
        writeln!(
            out,
            "  against the float model: greedy-token agreement {:.2} ({agreed} of {total}, {})",
            agreed as f64 / total.max(1) as f64,
            how_counted(check, "the float model's")
        )?;
    }
    if !check.identical {
        let (agreed, total) = agreement(check);
        writeln!(
            out,
            "  greedy-token agreement {:.2} ({agreed} of {total}, {})",
            agreed as f64 / total.max(1) as f64,
            how_counted(check, "eager's")
        )?;
    }
    for (i, step) in check.steps.iter().enumerate() {
        writeln!(
            out,
            "  token {:<3} {:?}{}  logits max abs {}{}",
            i + 1,
            step.tokens,
            if step.tokens == step.eager_tokens {
                String::new()
            } else {
                format!(" (eager {:?})", step.eager_tokens)
            },
            step.max_abs.map_or("not finite".into(), |e| format!("{e:.2e}")),
            if step.ok { "" } else { "  MISMATCH" }
        )?;
    }
    if let Some(genai) = &check.genai {
        writeln!(
            out,
            "genai {} greedy token(s) x {} row(s) from ONNX Runtime GenAI's `Generator`: {} eager `generate`",
            genai.eager_tokens.first().map_or(0, Vec::len),
            genai.eager_tokens.len(),
            if genai.identical { "identical to" } else { "DIFFERENT from" },
        )?;
        if !genai.identical {
            let (agreed, total) = row_agreement(&genai.tokens, &genai.eager_tokens);
            writeln!(
                out,
                "  greedy-token agreement {:.2} ({agreed} of {total}, each row up to its first difference)",
                agreed as f64 / total.max(1) as f64
            )?;
        }
        for (row, (tokens, eager)) in genai.tokens.iter().zip(&genai.eager_tokens).enumerate() {
            let differs =
                if tokens == eager { String::new() } else { format!(" (eager {eager:?})") };
            writeln!(out, "  row {:<3} {tokens:?}{differs}", row + 1)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(tokens: [i64; 2], eager: [i64; 2], ok: bool) -> GenerateStep {
        GenerateStep {
            tokens: tokens.to_vec(),
            eager_tokens: eager.to_vec(),
            max_abs: Some(0.1),
            ok,
            against_float: None,
        }
    }

    fn reply(teacher_forced: bool, steps: Vec<GenerateStep>) -> GenerateCheckReply {
        GenerateCheckReply {
            identical: false,
            teacher_forced,
            steps,
            calls: Vec::new(),
            providers: Vec::new(),
            genai: None,
        }
    }

    /// Free running, each row counts up to its first difference: the tokens
    /// after it follow another context, whatever they are, and so do the
    /// logits of every later step.
    #[test]
    fn free_running_agreement_counts_each_row_up_to_its_first_difference() {
        let check = reply(
            false,
            vec![
                step([1, 2], [1, 2], true),
                step([3, 9], [3, 4], true),
                step([5, 6], [5, 6], false),
            ],
        );
        assert_eq!(agreement(&check), (4, 6));
        assert_eq!(compared_steps(&check).len(), 1);
        let mut out = String::new();
        write(&mut out, &check, &held_to(0.5, None, false)).unwrap();
        assert!(
            out.contains(
                "greedy-token agreement 0.67 (4 of 6, each row up to its first difference)"
            ),
            "{out}"
        );
    }

    /// Teacher forced, every step is in eager's context: a flipped near-tie
    /// costs one token, and the logits of the steps after it are held to the
    /// tolerance too.
    #[test]
    fn teacher_forced_agreement_counts_every_step_and_compares_every_steps_logits() {
        let check = reply(
            true,
            vec![
                step([1, 2], [1, 2], true),
                step([3, 9], [3, 4], true),
                step([5, 6], [5, 6], false),
            ],
        );
        assert_eq!(agreement(&check), (5, 6));
        assert_eq!(compared_steps(&check).len(), 3);
        let mut out = String::new();
        write(&mut out, &check, &held_to(0.5, Some("8da4w"), false)).unwrap();
        assert!(
            out.contains(
                "generate 3 greedy token(s) x 2 row(s), each step given eager's tokens before it: DIFFERENT from"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "greedy-token agreement 0.83 (5 of 6, each step given eager's tokens before it)"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "  held to: 8da4w tolerance: each step's logits within 0.5 x its largest eager \
                 logit, greedy-token agreement at least 0.5, each step given eager's tokens before it"
            ),
            "{out}"
        );
    }

    /// Against the float model, the components are given its tokens: its
    /// agreement counts every step too.
    #[test]
    fn the_float_models_agreement_is_taken_in_its_own_context() {
        let mut steps = vec![step([1, 2], [1, 2], true), step([3, 4], [3, 4], true)];
        steps[0].against_float = Some(FloatStep { tokens: vec![1, 7], float_tokens: vec![1, 2] });
        steps[1].against_float = Some(FloatStep { tokens: vec![3, 4], float_tokens: vec![3, 4] });
        assert_eq!(float_agreement(&reply(true, steps)), Some((3, 4)));
    }
}
