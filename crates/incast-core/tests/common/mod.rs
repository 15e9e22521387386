//! What the property tests share.

/// Cases per property: 10,000 in release builds, 200 in debug builds (where the state
/// machines also check themselves after every event); `PROPTEST_CASES` overrides both.
pub fn cases() -> u32 {
    let default = if cfg!(debug_assertions) { 200 } else { 10_000 };
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
