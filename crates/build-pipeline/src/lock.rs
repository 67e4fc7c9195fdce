//! The build tree's lock: an `flock` the build's own processes inherit, so a killed build leaves
//! its tree locked until its Ninja and compilers are gone.

use std::path::Path;
use std::process::Command;

use crate::error::{Context, Result};

/// Opens (creating) the build tree's lock file `path` and takes its exclusive `flock`, calling
/// `on_wait` first when another build (or the processes of a killed one, which inherit it through
/// [`in_build`]) holds it. The one lock routine of build-mlx, build-ggml and test-upstream (every recipe).
pub fn lock_build_dir(path: &Path, on_wait: impl FnOnce()) -> Result<std::fs::File> {
    let lock =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            on_wait();
            lock.lock().context("locking the build directory")?;
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).context("locking the build directory");
        }
    }
    Ok(lock)
}

/// Makes `cmd` a process of the build that `lock` (the tree's `.lock`, flock'ed) guards:
///
/// - it inherits the lock's open file description (close-on-exec is cleared in the child only),
///   and so do Ninja's compilers and everything else it starts. An flock belongs to the open
///   file description, and the kernel releases it when the last descriptor referring to it is
///   closed: the tree stays locked until build-mlx *and* every process of its build have exited,
///   however build-mlx ended (SIGKILL included), and the next build-mlx waits for them.
/// - on Linux it gets SIGTERM when build-mlx dies (`PR_SET_PDEATHSIG`): an orphaned Ninja stops
///   its jobs and exits instead of building on for minutes while the next build-mlx waits.
///   (The signal follows the spawning *thread*: build-mlx spawns from the thread running `run`,
///   which outlives its children.)
pub fn in_build(cmd: &mut Command, lock: &std::fs::File) {
    #[cfg(unix)]
    {
        use std::os::unix::io::AsRawFd;
        use std::os::unix::process::CommandExt;
        let fd = lock.as_raw_fd();
        #[cfg(target_os = "linux")]
        let parent = std::process::id();
        // SAFETY: between fork and exec the closure only makes async-signal-safe calls (fcntl,
        // prctl, getppid) and allocates nothing on its success path.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                #[cfg(target_os = "linux")]
                {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    // build-mlx died before the prctl: nobody would signal this process.
                    if libc::getppid() as u32 != parent {
                        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                    }
                }
                Ok(())
            });
        }
    }
    #[cfg(not(unix))]
    let _ = (cmd, lock);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_waits_and_is_told() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("k.lock");
        let first = lock_build_dir(&p, || panic!("nobody holds it")).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            lock_build_dir(&p, move || tx.send(()).unwrap()).map(|_| ())
        });
        rx.recv().unwrap();
        drop(first);
        waiter.join().unwrap().unwrap();
    }
}
