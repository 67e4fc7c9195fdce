//! Progress: a bar on a terminal, throttled plain lines otherwise.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
    label: String,
    last: Option<Instant>,
    done: bool,
}

impl Progress {
    pub fn new(label: &str) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new(0);
            b.set_style(
                ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            b.set_message(label.to_string());
            b
        });
        Progress {
            bar,
            label: label.to_string(),
            last: None,
            done: false,
        }
    }

    pub fn update(&mut self, pos: u64, len: u64) {
        if let Some(b) = &self.bar {
            b.set_length(len);
            b.set_position(pos);
            return;
        }
        let complete = pos == len && len > 0;
        let due = self
            .last
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(2));
        if (due || complete) && !self.done {
            self.done = complete;
            eprintln!("{}: {pos}/{len}", self.label);
            self.last = Some(Instant::now());
        }
    }

    pub fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}
