//! `gpu-market serve` as the tests run it: the CLI binary the workspace built, for one market of
//! a cluster, on a free port; stopped when dropped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use solana_pubkey::Pubkey;

pub struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT`, as the service printed it.
    pub url: String,
}

impl Served {
    /// `cli serve` for `market` of the cluster at `rpc_url`.
    pub fn start(cli: &Path, rpc_url: &str, market: &Pubkey) -> Served {
        assert!(
            cli.exists(),
            "{} is missing: build the CLI (cargo build -p gpu-market-client)",
            cli.display()
        );
        let mut child = Command::new(cli)
            .args(["--url", rpc_url, "serve", "--listen", "127.0.0.1:0"])
            .args(["--market", &market.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("serving ")
            .unwrap_or_else(|| panic!("serve printed {line:?}"))
            .to_string();
        Served { child, url }
    }

    /// `host:port`.
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("http://")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
