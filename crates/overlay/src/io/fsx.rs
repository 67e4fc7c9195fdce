//! Every change the engine makes to a user's files (materialized trees, overlays, pins.toml, state
//! and journal files) goes through these few functions. One place makes writes durable and lets the
//! interruption tests kill the process at any of them.
//!
//! With the `fault-injection` feature, `OVERLAY_FAULT_KILL_AFTER=N` makes the N-th operation (1-based)
//! SIGKILL the process: a write is torn (half its bytes reach the file) and then the process dies; any
//! other operation dies before it happens. `OVERLAY_FAULT_COUNT=FILE` appends one line per operation
//! to FILE, so a test knows how many steps a command has. Without the feature both are ignored: a
//! production binary never kills itself.

use std::io::Write as _;
use std::path::Path;

use crate::error::{IoContext, Result};

#[cfg(feature = "fault-injection")]
mod fault {
    use std::sync::atomic::{AtomicUsize, Ordering};

    static STEP: AtomicUsize = AtomicUsize::new(0);

    /// Counts one operation; `Some(true)` means: this one must be interrupted.
    pub fn step(what: &str, path: &std::path::Path) -> bool {
        let n = STEP.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(f) = std::env::var_os("OVERLAY_FAULT_COUNT") {
            use std::io::Write as _;
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(f)
            {
                let _ = writeln!(f, "{n} {what} {}", path.display());
            }
        }
        std::env::var("OVERLAY_FAULT_KILL_AFTER")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            == Some(n)
    }

    pub fn die() -> ! {
        // SIGKILL, like the OOM killer or `kill -9`: no destructor, no flush, no unwinding.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        unreachable!("SIGKILL returned")
    }
}

#[cfg(not(feature = "fault-injection"))]
mod fault {
    #[inline(always)]
    pub fn step(_: &str, _: &std::path::Path) -> bool {
        false
    }
    pub fn die() -> ! {
        unreachable!()
    }
}

fn before(what: &str, path: &Path) {
    if fault::step(what, path) {
        fault::die();
    }
}

/// Creates `path` anew. Whatever sits there (a leftover temporary, or a symlink somebody planted at
/// our temporary's name) is removed first, and `O_EXCL` refuses to follow a link raced in after.
fn create_fresh(path: &Path) -> Result<std::fs::File> {
    if let Ok(m) = std::fs::symlink_metadata(path)
        && !m.is_dir()
    {
        std::fs::remove_file(path).at(path)?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .at(path)
}

/// Writes `bytes` to a new file `path` and flushes them to disk before returning. Never follows a
/// symlink at `path`: every caller writes a temporary it then renames.
pub fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    write_new(path, bytes, true)
}

/// [`write()`] without waiting for the disk: for materialized trees, which can always be re-created.
pub fn write_unsynced(path: &Path, bytes: &[u8]) -> Result<()> {
    write_new(path, bytes, false)
}

fn write_new(path: &Path, bytes: &[u8], sync: bool) -> Result<()> {
    let torn = fault::step("write", path);
    let mut f = create_fresh(path)?;
    if torn {
        let _ = f.write_all(&bytes[..bytes.len() / 2]);
        fault::die();
    }
    f.write_all(bytes).at(path)?;
    if sync {
        f.sync_all().at(path)?;
    }
    Ok(())
}

/// Atomically replaces `to` with `from` (same directory).
pub fn rename(from: &Path, to: &Path) -> Result<()> {
    before("rename", to);
    std::fs::rename(from, to).at(to)
}

/// Removes a file (or link); a fault-injection point.
pub fn remove_file(path: &Path) -> Result<()> {
    before("remove", path);
    std::fs::remove_file(path).at(path)
}

/// Removes an empty folder.
pub fn remove_dir(path: &Path) -> Result<()> {
    before("rmdir", path);
    std::fs::remove_dir(path).at(path)
}

/// Removes a folder and everything in it.
pub fn remove_dir_all(path: &Path) -> Result<()> {
    before("rmtree", path);
    std::fs::remove_dir_all(path).at(path)
}

/// Creates a folder and its parents.
pub fn create_dir_all(path: &Path) -> Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    before("mkdir", path);
    std::fs::create_dir_all(path).at(path)
}

/// Sets the permission bits of `path` to `mode`'s low bits.
#[cfg(unix)]
pub fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    before("chmod", path);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).at(path)
}

/// Creates a symbolic link at `path` pointing at `target`.
#[cfg(unix)]
pub fn symlink(target: &str, path: &Path) -> Result<()> {
    before("symlink", path);
    std::os::unix::fs::symlink(target, path).at(path)
}

/// Makes the renames inside `dir` durable (a crash after this cannot bring back the old names).
pub fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        std::fs::File::open(dir).at(dir)?.sync_all().at(dir)?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Writes `bytes` to `path` atomically: a temporary sibling, flushed, then renamed over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = sibling(path, "tmp");
    write(&tmp, bytes)?;
    rename(&tmp, path)
}

/// `dir/name` -> `dir/.name.overlay-<tag>`: hidden, and never a name the engine reads as input.
pub fn sibling(path: &Path, tag: &str) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.overlay-{tag}"))
}

/// Whether process `pid` still exists (a stage or journal of a dead process is debris).
pub fn pid_alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        // Signal 0 checks existence without sending anything; EPERM still means it exists.
        let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}
