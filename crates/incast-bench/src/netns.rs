//! Network namespaces held by this process, and threads and commands that run inside them.
//!
//! Why not `ip netns add`: a named namespace is a bind mount under /run/netns that outlives
//! the process, so a crash or Ctrl-C leaves it behind. Here a namespace is created by a
//! short-lived thread that calls `unshare(CLONE_NEWNET)`; the only thing keeping it alive is
//! the file descriptor of `/proc/thread-self/ns/net` that [`Netns`] owns. When the process
//! ends, for any reason, the kernel closes the descriptor and the namespace disappears with
//! every interface and qdisc inside it. `incast-bench testbed up` pins them by name on
//! purpose (`ip netns attach`); `testbed down` removes them.
//!
//! A network namespace is a per-thread property on Linux: a thread enters one with
//! `setns(fd, CLONE_NEWNET)` without affecting the other threads, sockets stay in the
//! namespace they were created in, and child processes start in their parent thread's
//! namespace. So [`Netns::run`] runs a closure on a fresh thread inside the namespace (a
//! tokio runtime there creates all its sockets inside), and [`Netns::command`] runs `ip`,
//! `tc` inside it.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Command;
use std::thread;

use nix::sched::CloneFlags;

/// A network namespace, alive as long as this value (or a process inside it) is.
#[derive(Debug)]
pub struct Netns {
    fd: OwnedFd,
    name: String,
}

fn unshare_net() -> io::Result<()> {
    Ok(nix::sched::unshare(CloneFlags::CLONE_NEWNET)?)
}

fn setns_net(fd: &OwnedFd) -> io::Result<()> {
    Ok(nix::sched::setns(fd, CloneFlags::CLONE_NEWNET)?)
}

impl Netns {
    /// Creates a new, empty network namespace (only `lo`, down). `name` is for messages.
    ///
    /// Fails with `PermissionDenied` without CAP_SYS_ADMIN (run as root, or inside
    /// `unshare -rn`).
    pub fn new(name: &str) -> io::Result<Self> {
        let fd = thread::Builder::new()
            .name(format!("netns-{name}"))
            .spawn(|| -> io::Result<OwnedFd> {
                unshare_net()?;
                Ok(File::open("/proc/thread-self/ns/net")?.into())
            })?
            .join()
            .map_err(|_| io::Error::other("namespace thread panicked"))??;
        Ok(Self {
            fd,
            name: name.to_owned(),
        })
    }

    /// Another handle to the same namespace (the namespace lives while either does).
    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(Self {
            fd: self.fd.try_clone()?,
            name: self.name.clone(),
        })
    }

    /// The name given at creation.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A path other processes (ip, tc) can open to reach this namespace.
    pub fn path(&self) -> String {
        format!("/proc/{}/fd/{}", std::process::id(), self.fd.as_raw_fd())
    }

    /// Runs `f` on a new thread inside the namespace and returns its result.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
        self.spawn(f)?
            .join()
            .map_err(|_| io::Error::other(format!("thread in namespace {} panicked", self.name)))?
    }

    /// Starts `f` on a new thread inside the namespace.
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<thread::JoinHandle<io::Result<T>>> {
        let fd = self.fd.try_clone()?;
        thread::Builder::new().name(format!("in-{}", self.name)).spawn(move || {
            setns_net(&fd)?;
            drop(fd);
            Ok(f())
        })
    }

    /// Runs a command inside the namespace; fails with its stderr when it exits non-zero.
    pub fn command(&self, program: &str, args: &[&str]) -> Result<String, CommandError> {
        let line = format!("{program} {}", args.join(" "));
        self.exec(program, args, None, line)
    }

    /// Runs `program -batch -` inside the namespace with `script` on its standard input (one
    /// `ip` or `tc` command a line): one process for many commands.
    pub fn batch(&self, program: &str, script: &str) -> Result<String, CommandError> {
        let first = script.lines().next().unwrap_or("");
        let line = format!("{program} -batch - ({} lines, first: {first})", script.lines().count());
        self.exec(program, &["-batch", "-"], Some(script.to_owned()), line)
    }

    /// Runs `program args` inside the namespace with `input` on its standard input (`nft -f -`).
    pub fn with_input(&self, program: &str, args: &[&str], input: &str) -> Result<String, CommandError> {
        let line = format!(
            "{program} {} ({} lines of input)",
            args.join(" "),
            input.lines().count()
        );
        self.exec(program, args, Some(input.to_owned()), line)
    }

    /// Runs `program args` inside the namespace, with `stdin` on its standard input when given;
    /// `line` names it in errors.
    fn exec(&self, program: &str, args: &[&str], stdin: Option<String>, line: String) -> Result<String, CommandError> {
        use std::io::Write as _;
        use std::process::Stdio;
        let program = program.to_owned();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let ns = self.name.clone();
        let out = self
            .run(move || -> io::Result<std::process::Output> {
                let mut cmd = Command::new(&program);
                cmd.args(&args);
                let Some(input) = stdin else {
                    return cmd.output();
                };
                let mut child = cmd
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()?;
                let mut pipe = child.stdin.take().expect("stdin is piped");
                let written = pipe.write_all(input.as_bytes());
                drop(pipe);
                let out = child.wait_with_output()?;
                written.map(|()| out)
            })
            .and_then(|r| r)
            .map_err(|source| CommandError::Spawn {
                line: line.clone(),
                ns: ns.clone(),
                source,
            })?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(CommandError::Failed {
                line,
                ns,
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            })
        }
    }

    /// Moves the calling thread into this namespace. Sockets the thread creates from now on
    /// live here (and stay here when the thread moves on); use it on threads this crate owns.
    pub fn enter(&self) -> io::Result<()> {
        setns_net(&self.fd)
    }

    /// Writes a sysctl of this namespace (`net/ipv4/tcp_congestion_control`) and reads it back.
    pub fn sysctl(&self, key: &str, value: &str) -> Result<String, CommandError> {
        let path = format!("/proc/sys/{key}");
        let v = value.to_owned();
        let line = format!("sysctl {key}={value}");
        self.run(move || -> io::Result<String> {
            std::fs::write(&path, &v)?;
            Ok(std::fs::read_to_string(&path)?.trim().to_owned())
        })
        .and_then(|r| r)
        .map_err(|source| CommandError::Spawn {
            line,
            ns: self.name.clone(),
            source,
        })
    }
}

/// A command run inside a namespace failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// It could not be started (or the namespace could not be entered).
    #[error("`{line}` in namespace {ns}: {source}")]
    Spawn {
        /// The command line.
        line: String,
        /// The namespace.
        ns: String,
        /// Why.
        source: io::Error,
    },
    /// It exited with an error.
    #[error("`{line}` in namespace {ns} failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        line: String,
        /// The namespace.
        ns: String,
        /// Exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
}
