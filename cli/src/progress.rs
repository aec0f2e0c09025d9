//! Progress bars for long work (import, export, sweep, bench), drawn on stderr.
//!
//! They are drawn when stderr is a terminal, and are silent otherwise so scripts and
//! pipes see only the results.

use std::io::{self, BufRead, IsTerminal, Read};

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `len` steps in `unit` (`bytes` shows sizes), or a spinner when `len` is
/// unknown; hidden when stderr is not a terminal.
pub(crate) fn bar(len: Option<u64>, message: &str, unit: Unit) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let template = match (len, unit) {
        (Some(_), Unit::Bytes) => "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
        (Some(_), Unit::Items) => "{msg} [{bar:30}] {human_pos}/{human_len} {per_sec} {eta}",
        (None, Unit::Bytes) => "{spinner} {msg} {bytes} {bytes_per_sec}",
        (None, Unit::Items) => "{spinner} {msg} {human_pos} {per_sec}",
    };
    let bar = match len {
        Some(len) => ProgressBar::new(len),
        None => ProgressBar::new_spinner(),
    };
    // The templates are constants above; a typo in one is a bug caught the first time
    // the bar is shown, and a plain bar is the right fallback.
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(message.to_string());
    bar
}

/// What a bar counts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Unit {
    /// Bytes of a file or stream.
    Bytes,
    /// Records or operations.
    Items,
}

/// A reader that advances a bar by the bytes read through it.
pub(crate) struct CountingReader<R> {
    inner: R,
    bar: ProgressBar,
}

impl<R> CountingReader<R> {
    /// Wraps `inner`.
    pub(crate) fn new(inner: R, bar: ProgressBar) -> CountingReader<R> {
        CountingReader { inner, bar }
    }
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bar.inc(n as u64);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for CountingReader<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amount: usize) {
        self.bar.inc(amount as u64);
        self.inner.consume(amount);
    }
}
