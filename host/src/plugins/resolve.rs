//! Which discovered plugins apply: a plugin whose `[upstream]` ranges do not
//! hold for the upstream versions at hand is skipped (with the reason); where a
//! folder holds several versions of one plugin, exactly one must apply.

use std::collections::BTreeMap;

use super::discover::Discovered;
use super::upstream::{self, Versions};

/// A plugin left out, and why.
#[derive(Debug, Clone)]
pub struct Skipped {
    pub found: Discovered,
    pub reason: String,
}

#[derive(Debug, Default)]
pub struct Resolution {
    pub active: Vec<Discovered>,
    pub skipped: Vec<Skipped>,
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("plugin `{name}`: none of its {} versions applies: {}", candidates.len(), list(candidates))]
    NoneApplies { name: String, candidates: Vec<(String, String)> },
    #[error("plugin `{name}`: {} versions apply, exactly one must: {}", candidates.len(), list(candidates))]
    SeveralApply { name: String, candidates: Vec<(String, String)> },
}

fn list(candidates: &[(String, String)]) -> String {
    candidates.iter().map(|(what, why)| format!("{what} ({why})")).collect::<Vec<_>>().join("; ")
}

/// Resolves `found` against `versions`; keeps discovery order.
pub fn resolve(found: Vec<Discovered>, versions: &Versions) -> Result<Resolution, ResolveError> {
    let mut by_name: BTreeMap<String, Vec<(Discovered, Option<String>)>> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for plugin in found {
        let name = plugin.manifest.plugin.name.clone();
        if !by_name.contains_key(&name) {
            order.push(name.clone());
        }
        let unmet = upstream::unmet(&plugin.manifest.upstream, versions);
        by_name.entry(name).or_default().push((plugin, unmet));
    }
    let mut resolution = Resolution::default();
    for name in order {
        let candidates = by_name.remove(&name).expect("grouped above");
        let describe = |c: &(Discovered, Option<String>)| {
            let what = format!("{} in {}", c.0.manifest.plugin.version, c.0.dir.display());
            let why = c.1.clone().unwrap_or_else(|| range_text(&c.0));
            (what, why)
        };
        let applying = candidates.iter().filter(|c| c.1.is_none()).count();
        match (candidates.len(), applying) {
            (1, _) | (_, 1) => {}
            (_, 0) => {
                return Err(ResolveError::NoneApplies {
                    name,
                    candidates: candidates.iter().map(describe).collect(),
                })
            }
            _ => {
                let matching = candidates.iter().filter(|c| c.1.is_none()).map(describe).collect();
                return Err(ResolveError::SeveralApply { name, candidates: matching });
            }
        }
        for (plugin, unmet) in candidates {
            match unmet {
                None => resolution.active.push(plugin),
                Some(reason) => resolution.skipped.push(Skipped { found: plugin, reason }),
            }
        }
    }
    Ok(resolution)
}

/// `torch >=2.12, <2.16` for display; `any upstream` without constraints.
pub fn range_text(plugin: &Discovered) -> String {
    if plugin.manifest.upstream.is_empty() {
        return "any upstream".into();
    }
    plugin.manifest.upstream.iter().map(|(p, r)| format!("{p} {r}")).collect::<Vec<_>>().join(", ")
}
