//! Records the git commit the binary is built from (JSON headers echo it).
use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=INCAST_GIT_COMMIT={commit}");
    for f in ["../../.git/HEAD", "../../.git/index"] {
        println!("cargo:rerun-if-changed={f}");
    }
}
