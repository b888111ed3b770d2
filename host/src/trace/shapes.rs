//! The sizes a trace's inputs take, as the user gives them: `--sample` (the
//! sizes of the sample inputs hfx generates) and `--dynamic-shapes` (a range
//! per input axis), parsed and checked before any work starts.

use std::fmt;

/// The largest sample size or range bound taken: past it a typo (an extra
/// digit) would ask the worker for gigabytes of sample inputs.
pub const MAX_SIZE: u32 = 1 << 20;

#[derive(Debug, PartialEq, thiserror::Error)]
pub enum ShapesError {
    #[error("--sample {item}: {why}")]
    Sample { item: String, why: String },
    #[error("--dynamic-shapes {item}: {why}")]
    Range { item: String, why: String },
}

/// The sizes of the sample inputs hfx generates for a model (`--sample
/// batch=2,sequence=8`): a static export takes exactly these; a dynamic one
/// is traced at them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleSizes {
    pub batch: u32,
    /// Tokens per sequence (text inputs; an image's or audio's own size is the model's).
    pub sequence: u32,
}

impl Default for SampleSizes {
    /// Distinct sizes of at least 2: torch.export fixes an axis of size 0
    /// or 1, and a model comparing two axes of equal size could tie them.
    fn default() -> Self {
        SampleSizes { batch: 2, sequence: 8 }
    }
}

impl SampleSizes {
    /// `items` (`batch=1`, `sequence=128`) over the defaults; `dynamic`:
    /// the trace keeps the axes dynamic, so each size must not be one that
    /// torch.export fixes.
    pub fn parse(items: &[String], dynamic: bool) -> Result<SampleSizes, ShapesError> {
        let mut sizes = SampleSizes::default();
        let mut seen: Vec<&str> = Vec::new();
        for item in items {
            let error = |why: String| ShapesError::Sample { item: item.clone(), why };
            let (name, value) = item
                .split_once('=')
                .map(|(n, v)| (n.trim(), v.trim()))
                .ok_or_else(|| error("expected AXIS=N, e.g. batch=1,sequence=128".into()))?;
            let slot = match name {
                "batch" => &mut sizes.batch,
                "sequence" => &mut sizes.sequence,
                other => {
                    return Err(error(format!("unknown axis `{other}` (batch, sequence)")));
                }
            };
            if seen.contains(&name) {
                return Err(error(format!("`{name}` given twice")));
            }
            seen.push(name);
            *slot =
                value.parse::<u32>().ok().filter(|n| (1..=MAX_SIZE).contains(n)).ok_or_else(
                    || error(format!("`{value}` is not a size from 1 to {MAX_SIZE}")),
                )?;
        }
        if dynamic {
            let items = items.join(",");
            let error = |why: String| ShapesError::Sample { item: items.clone(), why };
            for (name, n) in [("batch", sizes.batch), ("sequence", sizes.sequence)] {
                if n < 2 {
                    return Err(error(format!("torch.export fixes an axis traced at size {n}, so a dynamic {name} needs a sample of 2 or more; add --static to export exactly this size")));
                }
            }
            if sizes.batch == sizes.sequence {
                return Err(error(format!("batch and sequence both {}: a model comparing the two axes would tie them in the trace; give different sizes, or add --static", sizes.batch)));
            }
        }
        Ok(sizes)
    }
}

pub use super::protocol::AxisRange;

/// As the flag spells it (`input_ids:1=2..2048`), which is also how an
/// export folder's config records it.
impl fmt::Display for AxisRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}={}..{}", self.input, self.axis, self.min, self.max)
    }
}

/// A Python identifier in ASCII: an input's, a class's or a module's name.
pub fn is_identifier(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The most axes an input has that a range may name (a video's
/// batch, frames, channels, height, width, and some).
const MAX_AXES: u32 = 8;

impl AxisRange {
    /// Parses every `--dynamic-shapes` item; each input axis named once.
    pub fn parse_all(items: &[String]) -> Result<Vec<AxisRange>, ShapesError> {
        let mut ranges: Vec<AxisRange> = Vec::new();
        for item in items {
            let range = AxisRange::parse(item)?;
            if ranges.iter().any(|r| r.input == range.input && r.axis == range.axis) {
                return Err(ShapesError::Range {
                    item: item.clone(),
                    why: format!("{}:{} is given twice", range.input, range.axis),
                });
            }
            ranges.push(range);
        }
        Ok(ranges)
    }

    pub fn parse(item: &str) -> Result<AxisRange, ShapesError> {
        let error = |why: String| ShapesError::Range { item: item.to_string(), why };
        let form = "expected INPUT:AXIS=MIN..MAX, e.g. input_ids:1=2..2048";
        let (name_axis, bounds) = item.split_once('=').ok_or_else(|| error(form.into()))?;
        let (input, axis) = name_axis.split_once(':').ok_or_else(|| error(form.into()))?;
        let (min, max) = bounds.split_once("..").ok_or_else(|| error(form.into()))?;
        let (input, axis, min, max) = (input.trim(), axis.trim(), min.trim(), max.trim());
        if !is_identifier(input) {
            return Err(error(format!(
                "`{input}` is not an input's name (a forward argument, e.g. input_ids)"
            )));
        }
        let axis = axis.parse::<u32>().ok().filter(|a| *a < MAX_AXES).ok_or_else(|| {
            error(format!("axis `{axis}`: give an axis from 0 to {}", MAX_AXES - 1))
        })?;
        let size = |text: &str| {
            text.parse::<u32>()
                .ok()
                .filter(|n| *n <= MAX_SIZE)
                .ok_or_else(|| error(format!("`{text}` is not a size from 0 to {MAX_SIZE}")))
        };
        let (min, max) = (size(min)?, size(max)?);
        if min >= max {
            return Err(error(format!("the range {min}..{max} is empty or one size: give MIN < MAX (a fixed size needs no range)")));
        }
        if max < 2 {
            return Err(error(
                "torch.export fixes an axis whose sizes are 0 or 1: give a MAX of 2 or more".into(),
            ));
        }
        Ok(AxisRange { input: input.to_string(), axis, min, max })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sample_sizes_are_checked_before_any_work() {
        let parse = |items: &[&str], dynamic| SampleSizes::parse(&strings(items), dynamic);
        assert_eq!(parse(&[], true), Ok(SampleSizes { batch: 2, sequence: 8 }));
        assert_eq!(
            parse(&["batch=1", "sequence=128"], false),
            Ok(SampleSizes { batch: 1, sequence: 128 })
        );
        assert_eq!(parse(&["sequence=16"], true), Ok(SampleSizes { batch: 2, sequence: 16 }));
        let error = |items: &[&str], dynamic| parse(items, dynamic).unwrap_err().to_string();
        for (items, dynamic, expected) in [
            (
                &["batch=1"][..],
                true,
                "--sample batch=1: torch.export fixes an axis traced at size 1",
            ),
            (&["batch=1"], true, "add --static"),
            (&["batch=4", "sequence=4"], true, "batch and sequence both 4"),
            (&["bacth=2"], false, "unknown axis `bacth` (batch, sequence)"),
            (&["batch"], false, "expected AXIS=N"),
            (&["batch=0"], false, "`0` is not a size from 1 to 1048576"),
            (&["batch=two"], false, "`two` is not a size"),
            (&["batch=2", "batch=3"], false, "`batch` given twice"),
        ] {
            let message = error(items, dynamic);
            assert!(message.contains(expected), "{items:?}: {message}");
            assert!(!message.contains('\n'), "{message}");
        }
    }

    #[test]
    fn ranges_are_parsed_and_checked_before_any_work() {
        let range = AxisRange::parse("input_ids:1=2..2048").unwrap();
        assert_eq!(range, AxisRange { input: "input_ids".into(), axis: 1, min: 2, max: 2048 });
        assert_eq!(range.to_string(), "input_ids:1=2..2048");
        let sent = serde_json::json!({"input": "input_ids", "axis": 1, "min": 2, "max": 2048});
        assert_eq!(serde_json::to_value(&range).unwrap(), sent);
        for (item, expected) in [
            ("banana", "--dynamic-shapes banana: expected INPUT:AXIS=MIN..MAX"),
            ("input_ids:1=2048..2", "the range 2048..2 is empty"),
            ("input_ids:1=8..8", "is empty or one size"),
            ("input_ids:9=2..8", "axis `9`: give an axis from 0 to 7"),
            ("input_ids:x=2..8", "axis `x`"),
            ("input ids:1=2..8", "`input ids` is not an input's name"),
            ("input_ids:1=0..1", "give a MAX of 2 or more"),
            ("input_ids:1=2..99999999", "`99999999` is not a size"),
            ("input_ids:1=2-8", "expected INPUT:AXIS=MIN..MAX"),
        ] {
            let message = AxisRange::parse(item).unwrap_err().to_string();
            assert!(message.contains(expected), "{item}: {message}");
            assert!(!message.contains('\n'), "{message}");
        }
        let twice = AxisRange::parse_all(&strings(&["input_ids:1=2..8", "input_ids:1=2..16"]));
        assert!(twice.unwrap_err().to_string().contains("input_ids:1 is given twice"));
    }
}
