// The function table without a declared maximum, as a hand-written module
// would have it: only the host's table cap stands in the way of growing it.
fn main() {
    if std::env::var("TARGET").is_ok_and(|t| t.starts_with("wasm32")) {
        println!("cargo:rustc-link-arg-cdylib=--growable-table");
    }
}
