//! The limits a plugin runs under, and the store data that enforces the
//! host-side ones.
//!
//! Inside the sandbox: fuel (deterministic, reset before each call), an epoch
//! deadline (wall-clock backstop), a memory cap (all linear memories of an
//! instance together), a table cap, a wasm stack cap, and counts of instances,
//! memories and tables. Outside it, where the guest cannot see: how many nodes
//! one call may add, how many bytes it may read back from the host, and how
//! many bytes it may hand to the host (strings and lists in host calls and in
//! what it returns: wasmtime's hostcall fuel caps each single transfer, the
//! write budget their sum). No WASI is linked, so a plugin has no files,
//! network, clock or environment at all.
//!
//! Host functions run outside the wasm deadline's reach (epochs interrupt only
//! wasm code), so each one bounds what the guest asks of it before allocating:
//! counts and names against fixed caps, and every host allocation the call
//! causes (copies, derived names, journal entries) against the write budget at
//! its host size. Host work that grows with the graph or the guest's input
//! checks the call's deadline as it goes.

use std::time::{Duration, Instant};

use wasmtime::ResourceLimiter;

/// The host functions called straight from bytes: the fuzz target's body.
#[path = "host_calls.rs"]
pub mod host_calls;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Linear memory cap per instance (all its memories together).
    pub memory_bytes: usize,
    /// Fuel per call (roughly one unit per wasm instruction).
    pub fuel_per_call: u64,
    /// Wall-clock deadline per call.
    pub deadline: Duration,
    /// Nodes one call may add to the graph.
    pub max_new_nodes: u32,
    /// Bytes one call may read back from the host (strings, lists, metadata).
    pub max_read_bytes: u64,
    /// Bytes one call may hand to the host: strings and lists passed to host
    /// functions, summed over the call; also the most one host call (or one
    /// returned value) may copy out of the guest.
    pub max_write_bytes: u64,
    /// Elements per table (function references live outside linear memory).
    pub max_table_elements: usize,
}

/// Wasm stack per call (wasmtime's `max_wasm_stack`, set on the engine): deep
/// recursion traps as a stack overflow long before the host thread's native
/// stack (8 MiB on the main thread, 2 MiB on others) is at risk.
pub const MAX_WASM_STACK: usize = 512 << 10;
/// Bytes of targets `describe` may return (names and list together).
pub const MAX_DESCRIBE_BYTES: usize = 64 << 10;
/// Outputs of one node a plugin adds (`builder.add-node`'s `outputs`, the
/// values `graph.insert-call` declares): far beyond any real operator (a
/// `Split` into thousands), and small enough that one node's names are cheap.
pub const MAX_NODE_OUTPUTS: usize = 65_536;
/// Bytes of one identifier a plugin hands in: an op type, a domain, a target,
/// an argument, attribute, value or symbol name, a dtype, a device kind.
/// Strings that carry data (a string attribute or argument, an expression)
/// are bounded by the write budget alone.
pub const MAX_NAME_BYTES: usize = 4 << 10;
/// How many steps of host work go between two looks at the clock.
pub const DEADLINE_CHECK_EVERY: usize = 1 << 12;
/// Bytes of an error message a plugin may return.
pub const MAX_MESSAGE_BYTES: usize = 4 << 10;
/// Core instances, tables and linear memories per store (one store per plugin
/// instance). A component made by wit-component has a few instances, one
/// memory and one or two tables.
pub const MAX_INSTANCES: usize = 32;
pub const MAX_TABLES: usize = 8;
pub const MAX_MEMORIES: usize = 2;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 64 << 20,
            fuel_per_call: 500_000_000,
            deadline: Duration::from_secs(2),
            max_new_nodes: 10_000,
            max_read_bytes: 64 << 20,
            max_write_bytes: 16 << 20,
            max_table_elements: 10_000,
        }
    }
}

/// Host-side budgets of the current call, and the limits they count against.
#[derive(Debug)]
pub struct CallBudget {
    pub limits: Limits,
    pub new_nodes: u32,
    pub read_bytes: u64,
    pub written_bytes: u64,
    /// When the call's wall-clock deadline passes: the instant its epoch
    /// deadline stands for, which host work checks (epochs cannot stop it).
    pub deadline: Instant,
    /// Set when a budget tripped, so the trap it caused is reported as such.
    pub exceeded: Option<String>,
    /// The host function that found the deadline passed.
    pub deadline_passed_in: Option<&'static str>,
}

impl CallBudget {
    pub fn new(limits: Limits) -> Self {
        CallBudget {
            limits,
            new_nodes: 0,
            read_bytes: 0,
            written_bytes: 0,
            deadline: deadline_after(limits.deadline),
            exceeded: None,
            deadline_passed_in: None,
        }
    }

    /// Fresh budgets and a fresh deadline for the next call.
    pub fn reset(&mut self) {
        *self = CallBudget::new(self.limits);
    }

    /// Charges `bytes` read by the guest from `function`; a trap once over budget.
    pub fn charge_read(&mut self, function: &str, bytes: usize) -> wasmtime::Result<()> {
        self.read_bytes = self.read_bytes.saturating_add(bytes as u64);
        if self.read_bytes > self.limits.max_read_bytes {
            return self.trip(format!(
                "`{function}` read more than {} bytes from the host in one call",
                self.limits.max_read_bytes
            ));
        }
        Ok(())
    }

    /// Charges `bytes` handed over by the guest to `function` (strings and
    /// lists passed in); a trap once over budget.
    pub fn charge_write(&mut self, function: &str, bytes: usize) -> wasmtime::Result<()> {
        self.written_bytes = self.written_bytes.saturating_add(bytes as u64);
        if self.written_bytes > self.limits.max_write_bytes {
            return self.trip(format!(
                "`{function}` {}",
                write_budget_message(self.limits.max_write_bytes)
            ));
        }
        Ok(())
    }

    /// Charges what `function` is about to allocate on the host on the
    /// guest's behalf (`what`, `bytes` of it, `None` past `usize`) against the
    /// write budget, before allocating it; a trap once over budget.
    pub fn charge_host(
        &mut self,
        function: &str,
        what: &dyn std::fmt::Display,
        bytes: Option<usize>,
    ) -> wasmtime::Result<()> {
        let bytes = bytes.map_or(u64::MAX, |b| b as u64);
        let total = self.written_bytes.saturating_add(bytes);
        if total > self.limits.max_write_bytes {
            let size = if bytes == u64::MAX {
                "more than the address space".to_string()
            } else {
                format!("{bytes} bytes")
            };
            return self.trip(format!(
                "`{function}` would allocate {size} on the host for {what}, over the write budget of {} bytes in one call",
                self.limits.max_write_bytes
            ));
        }
        self.written_bytes = total;
        Ok(())
    }

    /// Charges one new node added by `function`; a trap once over budget.
    pub fn charge_node(&mut self, function: &str) -> wasmtime::Result<()> {
        self.new_nodes += 1;
        if self.new_nodes > self.limits.max_new_nodes {
            return self.trip(format!(
                "`{function}` added more than {} nodes in one call",
                self.limits.max_new_nodes
            ));
        }
        Ok(())
    }

    /// Refuses `count` items of `what` in one `function` call past `max`.
    pub fn check_count(
        &mut self,
        function: &str,
        what: &str,
        count: usize,
        max: usize,
    ) -> wasmtime::Result<()> {
        if count > max {
            return self.trip(format!("`{function}` was asked for {count} {what} (at most {max})"));
        }
        Ok(())
    }

    /// Refuses an identifier (`what`: an op type, a target, a name) longer
    /// than `MAX_NAME_BYTES`.
    pub fn check_name(&mut self, function: &str, what: &str, name: &str) -> wasmtime::Result<()> {
        if name.len() > MAX_NAME_BYTES {
            return self.trip(format!(
                "`{function}` was given {what} of {} bytes (at most {MAX_NAME_BYTES})",
                name.len()
            ));
        }
        Ok(())
    }

    /// A trap once the call's deadline has passed: host work that grows with
    /// the guest's input calls this as it goes (`Ticks` every so many steps).
    pub fn check_deadline(&mut self, function: &'static str) -> wasmtime::Result<()> {
        if Instant::now() <= self.deadline {
            return Ok(());
        }
        self.deadline_passed_in = Some(function);
        Err(wasmtime::Error::msg(format!("`{function}` ran past the call's deadline")))
    }

    fn trip(&mut self, message: String) -> wasmtime::Result<()> {
        self.exceeded = Some(message.clone());
        Err(wasmtime::Error::msg(message))
    }
}

/// `now + after`, or as far as an `Instant` goes (a deadline of years is no deadline).
fn deadline_after(after: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(after).unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// Counts steps of host work and looks at the deadline every
/// `DEADLINE_CHECK_EVERY` of them (a clock read costs more than a step).
pub struct Ticks {
    function: &'static str,
    steps: usize,
}

impl Ticks {
    pub fn new(function: &'static str) -> Self {
        Ticks { function, steps: 0 }
    }

    pub fn step(&mut self, budget: &mut CallBudget) -> wasmtime::Result<()> {
        self.steps += 1;
        if self.steps.is_multiple_of(DEADLINE_CHECK_EVERY) {
            budget.check_deadline(self.function)?;
        }
        Ok(())
    }
}

/// What the write budget says when it trips (also for wasmtime's hostcall
/// fuel, which trips first when one transfer alone is over the budget).
pub fn write_budget_message(max: u64) -> String {
    format!("wrote more than {max} bytes to the host in one call")
}

/// Caps linear memory (all memories of the store together) and table sizes,
/// and counts instances, tables and memories. Remembers a denial, so that the
/// resulting trap is reported as the cap rather than as whatever the guest did
/// next.
pub struct MemoryLimiter {
    pub cap: usize,
    /// Bytes of linear memory the store's memories hold together.
    pub used: usize,
    pub denied: bool,
    pub table_cap: usize,
    pub table_denied: bool,
}

impl MemoryLimiter {
    pub fn new(limits: &Limits) -> Self {
        MemoryLimiter {
            cap: limits.memory_bytes,
            used: 0,
            denied: false,
            table_cap: limits.max_table_elements,
            table_denied: false,
        }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|max| desired > max) {
            // Past the memory's own declared maximum: a plain failed grow, nothing held.
            return Ok(false);
        }
        let total = self.used.saturating_sub(current).saturating_add(desired);
        if total > self.cap {
            self.denied = true;
            return Err(wasmtime::Error::msg(format!(
                "memory growth to {desired} bytes ({total} in all memories) exceeds the cap of {}",
                self.cap
            )));
        }
        self.used = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.table_cap {
            self.table_denied = true;
            return Err(wasmtime::Error::msg(format!(
                "table growth to {desired} elements exceeds the cap of {}",
                self.table_cap
            )));
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}
