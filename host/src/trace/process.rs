//! Facts about other processes that the worker's box and the cleanup of a
//! dead hfx's leftovers both need.

/// Whether process `pid` exists (a zombie counts as gone).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            !stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        }
        Err(_) => false,
    }
}
