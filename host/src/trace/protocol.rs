//! The worker's side of protocol 1, as the host reads it: lines of bounded
//! length, each one typed message. A line that is too long, not UTF-8, not
//! JSON or missing a field is a `TraceError::Protocol`, never a panic.

use std::io::{self, BufRead};

use serde::Deserialize;
use serde_json::Value;

use super::TraceError;

/// The longest line the host accepts from the worker (a response carries
/// metadata, never tensors: the largest seen are well under 1 MiB).
pub const MAX_LINE: usize = 64 << 20;

/// What the worker's stdout gave: a line, or why reading stopped.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    Line(String),
    /// A line longer than the limit (the worker is stopped).
    TooLong(usize),
    /// A line that is not UTF-8.
    NotUtf8,
}

/// Reads one line (without its `\n`) of at most `limit` bytes; `None` at the
/// end of the stream. A last line without a newline is still a line. Never
/// holds more than `limit` bytes (plus one read buffer) of a long line.
pub fn read_line_bounded(reader: &mut impl BufRead, limit: usize) -> io::Result<Option<Incoming>> {
    let mut line = Vec::new();
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            if line.is_empty() {
                return Ok(None);
            }
            break;
        }
        let (taken, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (available.len(), false),
        };
        if line.len() + taken > limit {
            return Ok(Some(Incoming::TooLong(limit)));
        }
        line.extend_from_slice(&available[..taken]);
        reader.consume(if done { taken + 1 } else { taken });
        if done {
            break;
        }
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(Some(match String::from_utf8(line) {
        Ok(text) => Incoming::Line(text),
        Err(_) => Incoming::NotUtf8,
    }))
}

/// A Python exception the worker reports for a request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PythonError {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    #[serde(default)]
    pub traceback: String,
}

/// One line from the worker.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// `{"progress": {...}}`: a step of the running request.
    Progress(Value),
    /// `{"patch_call": {...}}`: a patched call the host answers with a program.
    PatchCall(Value),
    /// `{"id": N, "result": ...}` or `{"id": N, "error": {...}}`.
    Response { id: u64, outcome: Result<Value, PythonError> },
}

/// The first characters of a line, for an error message (a line may be 64 MiB).
fn excerpt(line: &str) -> String {
    const SHOWN: usize = 200;
    match line.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}... ({} bytes)", &line[..cut], line.len()),
        None => line.to_string(),
    }
}

/// Types one worker line.
pub fn parse_message(line: &str) -> Result<Message, TraceError> {
    let bad = |why: &str| TraceError::Protocol(format!("{why}: `{}`", excerpt(line)));
    let value: Value = serde_json::from_str(line).map_err(|e| bad(&format!("a worker line is not JSON ({e})")))?;
    let Value::Object(mut fields) = value else { return Err(bad("a worker line is not a JSON object")) };
    if let Some(progress) = fields.remove("progress") {
        return Ok(Message::Progress(progress));
    }
    if let Some(call) = fields.remove("patch_call") {
        return Ok(Message::PatchCall(call));
    }
    let id = match fields.get("id") {
        Some(id) => id.as_u64().ok_or_else(|| bad("a response's `id` is not a request number"))?,
        None => return Err(bad("a worker line is neither progress, a patch call nor a response (no `id`)")),
    };
    let outcome = match (fields.remove("result"), fields.remove("error")) {
        (_, Some(error)) => Err(serde_json::from_value::<PythonError>(error)
            .map_err(|e| bad(&format!("a response's `error` is malformed ({e})")))?),
        (Some(result), None) => Ok(result),
        (None, None) => return Err(bad("a response has neither `result` nor `error`")),
    };
    Ok(Message::Response { id, outcome })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], limit: usize) -> Vec<Incoming> {
        // A tiny buffer: lines span many reads.
        let mut reader = io::BufReader::with_capacity(3, input);
        let mut got = Vec::new();
        // As the host reads: a refused line is the last.
        while let Some(incoming) = read_line_bounded(&mut reader, limit).unwrap() {
            let refused = !matches!(incoming, Incoming::Line(_));
            got.push(incoming);
            if refused {
                break;
            }
        }
        got
    }

    #[test]
    fn lines_are_split_at_newlines_and_a_last_line_needs_none() {
        let got = lines(b"{\"a\": 1}\nsecond\r\n\nlast", 64);
        let text = |s: &str| Incoming::Line(s.into());
        assert_eq!(got, [text("{\"a\": 1}"), text("second"), text(""), text("last")]);
        assert_eq!(lines(b"", 64), []);
    }

    #[test]
    fn a_line_at_the_limit_passes_and_one_byte_more_is_refused() {
        assert_eq!(lines(b"12345678\nnext\n", 8), [Incoming::Line("12345678".into()), Incoming::Line("next".into())]);
        assert_eq!(lines(b"123456789\n", 8), [Incoming::TooLong(8)]);
    }

    #[test]
    fn a_long_line_without_newline_is_refused_without_reading_it_all() {
        // An endless stream: the reader must stop at the limit, not wait for a newline.
        let mut endless = io::BufReader::new(io::repeat(b'x'));
        assert_eq!(read_line_bounded(&mut endless, 1 << 20).unwrap(), Some(Incoming::TooLong(1 << 20)));
    }

    #[test]
    fn a_line_that_is_not_utf8_is_reported() {
        assert_eq!(lines(b"\xff\xfe\n", 64), [Incoming::NotUtf8]);
    }

    #[test]
    fn messages_are_typed() {
        assert_eq!(parse_message(r#"{"progress": {"stage": "import"}}"#).unwrap(), Message::Progress(serde_json::json!({"stage": "import"})));
        assert_eq!(parse_message(r#"{"patch_call": {"plugin": "p"}}"#).unwrap(), Message::PatchCall(serde_json::json!({"plugin": "p"})));
        assert_eq!(parse_message(r#"{"id": 3, "result": null}"#).unwrap(), Message::Response { id: 3, outcome: Ok(Value::Null) });
        let error = r#"{"id": 4, "error": {"type": "ValueError", "message": "no", "traceback": "Traceback..."}}"#;
        let expected = PythonError { kind: "ValueError".into(), message: "no".into(), traceback: "Traceback...".into() };
        assert_eq!(parse_message(error).unwrap(), Message::Response { id: 4, outcome: Err(expected) });
    }

    #[test]
    fn malformed_messages_are_protocol_errors_naming_the_problem() {
        let cases = [
            ("not json", "not JSON"),
            ("[1, 2]", "not a JSON object"),
            (r#"{"hello": 1}"#, "no `id`"),
            (r#"{"id": "one", "result": 1}"#, "not a request number"),
            (r#"{"id": -1, "result": 1}"#, "not a request number"),
            (r#"{"id": 1}"#, "neither `result` nor `error`"),
            (r#"{"id": 1, "error": "boom"}"#, "`error` is malformed"),
            (r#"{"id": 1, "error": {"type": "E"}}"#, "`error` is malformed"),
        ];
        for (line, why) in cases {
            match parse_message(line) {
                Err(TraceError::Protocol(message)) => assert!(message.contains(why) && message.contains(line), "{line}: {message}"),
                other => panic!("{line}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_long_malformed_line_is_shown_shortened() {
        let line = "x".repeat(10_000);
        let Err(TraceError::Protocol(message)) = parse_message(&line) else { panic!() };
        assert!(message.len() < 500 && message.contains("(10000 bytes)"), "{message}");
    }
}
