//! Records the git commit the binary is built from (JSON headers echo it), with `-dirty` when
//! tracked files differ from that commit, so a header never names a commit whose code it did
//! not run.
use std::process::Command;

fn main() {
    let git = |args: &[&str]| Command::new("git").args(args).output().ok();
    let commit = git(&["rev-parse", "--short=12", "HEAD"])
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    let dirty = git(&["diff", "--quiet", "HEAD", "--"]).is_some_and(|o| o.status.code() == Some(1));
    let suffix = if dirty { "-dirty" } else { "" };
    println!("cargo:rustc-env=INCAST_GIT_COMMIT={commit}{suffix}");
    // The sources too, so that an edit after the last commit marks the build dirty.
    for f in [
        "../../.git/HEAD",
        "../../.git/index",
        "../../.git/refs/heads",
        "src",
        "../incast-rpc/src",
        "../incast-core/src",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
}
