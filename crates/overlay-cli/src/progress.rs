//! Progress: a bar on a terminal, throttled plain lines otherwise.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// What both progress reports share: on a terminal (stderr) an indicatif bar, made at the first
/// update that has a total so an empty bar never shows; elsewhere plain lines, at most one per
/// `every` unless the caller forces one.
struct Ticker {
    tty: bool,
    bar: Option<ProgressBar>,
    /// The bar's indicatif template; `{spinner}` in it makes the bar tick on its own.
    template: &'static str,
    every: Duration,
    last: Option<Instant>,
}

impl Ticker {
    fn new(template: &'static str, every: Duration) -> Ticker {
        Ticker {
            tty: std::io::stderr().is_terminal(),
            bar: None,
            template,
            every,
            last: None,
        }
    }

    /// Shows `msg` and `pos/len` on the bar (made on first use); false when stderr is not a
    /// terminal, so the caller prints a line instead.
    fn bar(&mut self, pos: u64, len: u64, msg: &str) -> bool {
        if !self.tty {
            return false;
        }
        let template = self.template;
        let b = self.bar.get_or_insert_with(|| {
            let b = ProgressBar::new(len);
            b.set_style(
                ProgressStyle::with_template(template)
                    .expect("static template")
                    .progress_chars("=> "),
            );
            if template.contains("{spinner}") {
                b.enable_steady_tick(Duration::from_millis(200));
            }
            b
        });
        if b.message() != msg {
            b.set_message(msg.to_string());
        }
        b.set_length(len);
        b.set_position(pos);
        true
    }

    /// Whether a plain line is due (the first, one `every` after the last, or `force`d); if so,
    /// it counts as printed.
    fn due(&mut self, force: bool) -> bool {
        let due = force || self.last.is_none_or(|t| t.elapsed() >= self.every);
        if due {
            self.last = Some(Instant::now());
        }
        due
    }

    fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// A fetch's progress: `label [bar] pos/len`, or `label: pos/len` lines every 2 s.
pub struct Progress {
    ticker: Ticker,
    label: String,
    /// The complete line was printed: nothing more.
    done: bool,
}

impl Progress {
    pub fn new(label: &str) -> Progress {
        Progress {
            ticker: Ticker::new("{msg} [{bar:30}] {pos}/{len}", Duration::from_secs(2)),
            label: label.to_string(),
            done: false,
        }
    }

    /// An upstream fetch's report: a wait for another process's lock as a line, received objects
    /// on the bar.
    pub fn fetch(&mut self, p: overlay::upstream::FetchProgress) {
        match p {
            overlay::upstream::FetchProgress::Waiting { cache_path } => {
                eprintln!("waiting for another process using {}", cache_path.display())
            }
            overlay::upstream::FetchProgress::Transfer {
                received_objects,
                total_objects,
                ..
            } => self.update(received_objects as u64, total_objects as u64),
        }
    }

    pub fn update(&mut self, pos: u64, len: u64) {
        // Nothing to receive (an up-to-date fetch): no `0/0` bar or line. The bar is made at the
        // first real update, so a terminal never shows an empty one either.
        if len == 0 {
            return;
        }
        if self.ticker.bar(pos, len, &self.label) {
            return;
        }
        if let Some(line) = self.line(pos, len) {
            eprintln!("{line}");
        }
    }

    /// The plain line to print for this update, if one is due.
    fn line(&mut self, pos: u64, len: u64) -> Option<String> {
        if len == 0 || self.done {
            return None;
        }
        let complete = pos == len;
        if self.ticker.due(complete) {
            self.done = complete;
            return Some(format!("{}: {pos}/{len}", self.label));
        }
        None
    }

    pub fn finish(mut self) {
        self.ticker.finish();
    }
}

/// A build's progress on stderr: its news as lines, its steps (Ninja's status) as a bar on a
/// terminal, else as lines throttled to one per 10 s (CI logs stay readable). A build crate's
/// progress trait is implemented on top of it by the fork's tasks: this crate names no build.
pub struct BuildProgress {
    /// The bar is made on the first status line: before Ninja reports a total there is nothing
    /// to show.
    ticker: Ticker,
}

impl Default for BuildProgress {
    fn default() -> Self {
        BuildProgress {
            ticker: Ticker::new(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {wide_msg}",
                Duration::from_secs(10),
            ),
        }
    }
}

impl BuildProgress {
    /// A line of news (`configuring …`).
    pub fn message(&mut self, msg: &str) {
        eprintln!("{msg}");
    }

    /// Step `n` of `m`, doing `desc`.
    pub fn step(&mut self, n: u64, m: u64, desc: &str) {
        if !self.ticker.bar(n, m, desc) && self.ticker.due(n == m) {
            eprintln!("[{n}/{m}] {desc}");
        }
    }

    /// The steps are over: the bar goes.
    pub fn steps_done(&mut self) {
        self.ticker.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(label: &str) -> Progress {
        let mut p = Progress::new(label);
        p.ticker.tty = false;
        p
    }

    #[test]
    fn nothing_to_fetch_prints_no_zero_of_zero() {
        let mut p = plain("fetching up");
        assert_eq!(p.line(0, 0), None, "an up-to-date fetch draws nothing");
        assert_eq!(p.line(1, 4).as_deref(), Some("fetching up: 1/4"));
        assert_eq!(p.line(2, 4), None, "throttled");
        assert_eq!(p.line(4, 4).as_deref(), Some("fetching up: 4/4"));
        assert_eq!(p.line(4, 4), None, "once complete, done");
        // On a terminal, no bar exists until there is something to fetch.
        let mut t = Progress::new("fetching up");
        t.ticker.tty = true;
        t.update(0, 0);
        assert!(t.ticker.bar.is_none(), "an up-to-date fetch makes no bar");
    }

    #[test]
    fn build_lines_are_throttled_but_the_last_always_shows() {
        let mut t = Ticker::new("", Duration::from_secs(10));
        assert!(t.due(false), "the first line shows");
        assert!(!t.due(false), "then one per 10 s");
        assert!(t.due(true), "the n == m line shows");
    }
}
