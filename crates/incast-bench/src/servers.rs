//! Many pattern servers in one thread (and, on the testbed, in the servers' namespace).
//!
//! One thread with a current-thread runtime hosts every server: on a 2-core machine the
//! client gets the other core, and the servers' sockets all meet in the one shaped queue,
//! which is what incast needs (the seeds' senders are separate hosts, but what matters is
//! that their flows share the bottleneck).

use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc;
use std::thread::JoinHandle;

use incast_core::ServerId;
use incast_rpc::{serve, ServerConfig};
use tokio::sync::oneshot;

use crate::netns::Netns;
use crate::pattern::PatternStore;

/// Running servers; dropping the value stops them.
#[derive(Debug)]
pub struct ServerSet {
    addrs: Vec<(ServerId, SocketAddr)>,
    tuning: Option<String>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<std::io::Result<std::io::Result<()>>>>,
}

impl ServerSet {
    /// Starts `count` servers on `ip` (ephemeral ports), inside `ns` when given.
    pub fn start(ns: Option<&Netns>, ip: IpAddr, count: usize, config: ServerConfig) -> std::io::Result<Self> {
        let (addr_tx, addr_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let body = move || -> std::io::Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async move {
                let mut handles = Vec::with_capacity(count);
                for i in 0..count {
                    match serve(SocketAddr::new(ip, 0), PatternStore, config.clone()).await {
                        Ok(h) => {
                            let _ = addr_tx.send(Ok((ServerId(i as u32), h.local_addr(), h.tuning_report())));
                            handles.push(h);
                        }
                        Err(e) => {
                            let _ = addr_tx.send(Err(e));
                            return;
                        }
                    }
                }
                let _ = stop_rx.await;
                for h in handles {
                    h.abort();
                }
            });
            Ok(())
        };
        let thread = match ns {
            Some(ns) => ns.spawn(body)?,
            None => std::thread::Builder::new()
                .name("servers".into())
                .spawn(move || Ok(body()))?,
        };
        let mut addrs = Vec::with_capacity(count);
        let mut tuning = None;
        // The sender lives as long as the servers, so receive exactly `count` answers (or
        // stop early when the thread ended).
        for r in addr_rx.iter().take(count) {
            let (id, addr, t) = r?;
            addrs.push((id, addr));
            tuning = tuning.or(t);
        }
        if addrs.len() != count {
            return Err(std::io::Error::other(format!(
                "only {} of {count} servers started",
                addrs.len()
            )));
        }
        Ok(Self {
            addrs,
            tuning,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// What the kernel did with the first server's socket options, as text.
    pub fn tuning_report(&self) -> Option<&str> {
        self.tuning.as_deref()
    }

    /// Server ids and addresses.
    pub fn addrs(&self) -> &[(ServerId, SocketAddr)] {
        &self.addrs
    }
}

impl Drop for ServerSet {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
