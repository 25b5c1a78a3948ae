//! `lease exec -t`: our terminal handed to a command in the lease's container, as `docker exec
//! -t` does. Standard input goes raw (no line editing, no echo, no signals: the remote terminal
//! does all that), and comes back as it was however the command ends; the window's size goes
//! with the request and each change follows (SIGWINCH). Through rustix's termios calls.

use std::io::IsTerminal;

use anyhow::{bail, Context, Result};
use futures_util::Stream;
use gpu_market_sdk::api::TermSize;
use rustix::termios::{tcgetattr, tcgetwinsize, tcsetattr, OptionalActions, Termios};
use tokio::signal::unix::{signal, SignalKind};

/// The size a terminal that does not tell its own is taken to have.
const FALLBACK: TermSize = TermSize { rows: 24, cols: 80 };

/// Our terminal in raw mode until this is dropped.
pub struct RawTerminal {
    saved: Termios,
}

impl RawTerminal {
    /// Puts standard input, which must be a terminal, in raw mode.
    pub fn enter() -> Result<Self> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            bail!("-t needs a terminal on standard input (as `docker exec -t` does); leave -t out to pipe input");
        }
        let saved = tcgetattr(&stdin).context("cannot read the terminal's settings")?;
        let mut raw = saved.clone();
        raw.make_raw();
        tcsetattr(&stdin, OptionalActions::Now, &raw)
            .context("cannot put the terminal in raw mode")?;
        Ok(RawTerminal { saved })
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let _ = tcsetattr(std::io::stdin(), OptionalActions::Now, &self.saved);
    }
}

/// Our terminal's size now.
pub fn size() -> TermSize {
    match tcgetwinsize(std::io::stdin()) {
        Ok(w) if w.ws_row > 0 && w.ws_col > 0 => TermSize {
            rows: w.ws_row,
            cols: w.ws_col,
        },
        _ => FALLBACK,
    }
}

/// Our terminal's size each time the window changes. Inside a runtime.
pub fn resizes() -> Result<impl Stream<Item = TermSize>> {
    let changes = signal(SignalKind::window_change()).context("cannot watch the window's size")?;
    Ok(futures_util::stream::unfold(
        changes,
        |mut changes| async move { changes.recv().await.map(|()| (size(), changes)) },
    ))
}
