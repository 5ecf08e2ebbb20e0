//! Starting a program held before its exec, so that sampling can be set up on its process
//! first and begin at the exec (`enable_on_exec`): none of the program's own code runs
//! unsampled. `std::process::Command` cannot do this (its `spawn` waits for the exec), so
//! the fork is ours; the child between fork and exec only reads a pipe and calls `execve`,
//! both async-signal-safe, with everything they need built before the fork.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::Error;

/// A forked child waiting to exec its program.
#[derive(Debug)]
pub struct HeldChild {
    pid: i32,
    program: String,
    go: OwnedFd,
    exec_error: OwnedFd,
}

/// A started program.
#[derive(Debug)]
pub struct Child {
    pid: i32,
    status: Option<i32>,
}

/// Forks a child that will run `argv` once released.
///
/// # Errors
/// `argv` is empty, its program is not found, or the fork fails.
pub fn spawn_held(argv: &[OsString]) -> Result<HeldChild, Error> {
    let program = argv
        .first()
        .ok_or_else(|| Error::Launch("no program to run".to_owned()))?;
    let shown = program.to_string_lossy().into_owned();
    let path = resolve(program).ok_or_else(|| {
        Error::Launch(if program.as_bytes().contains(&b'/') {
            format!("cannot run {shown}: no such executable file")
        } else {
            format!("{shown}: not found (nor on PATH)")
        })
    })?;
    let cstring = |s: &OsStr| {
        CString::new(s.as_bytes())
            .map_err(|_| Error::Launch(format!("{shown}: an argument holds a NUL byte")))
    };
    let path = cstring(path.as_os_str())?;
    let args: Vec<CString> = argv.iter().map(|a| cstring(a)).collect::<Result<_, _>>()?;
    let env: Vec<CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k;
            kv.push("=");
            kv.push(v);
            CString::new(kv.as_bytes()).ok()
        })
        .collect();
    let mut arg_ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    arg_ptrs.push(std::ptr::null());
    let mut env_ptrs: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());
    let (go_read, go) = pipe()?;
    let (exec_error, error_write) = pipe()?;
    // SAFETY: fork has no preconditions; the child below calls only async-signal-safe
    // functions (read, write, execve, _exit) on memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Error::Launch(format!(
            "{shown}: cannot fork: {}",
            io::Error::last_os_error()
        )));
    }
    if pid == 0 {
        // The child: wait for the go-ahead, then exec; report exec's errno if it fails.
        // Its copy of the go-ahead's write end is closed first, so that a parent that ends
        // without releasing it ends the wait (EOF).
        // SAFETY: closing a descriptor this process owns and does not use again.
        unsafe { libc::close(go.as_raw_fd()) };
        let mut byte = 0u8;
        // SAFETY: reading one byte into a live local from a pipe fd this process owns.
        let n = unsafe { libc::read(go_read.as_raw_fd(), (&mut byte as *mut u8).cast(), 1) };
        if n != 1 {
            // SAFETY: _exit ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(126) };
        }
        // SAFETY: path, argv and envp are NUL-terminated arrays of live C strings.
        unsafe { libc::execve(path.as_ptr(), arg_ptrs.as_ptr(), env_ptrs.as_ptr()) };
        let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        // SAFETY: writing 4 bytes from a live local to a pipe fd this process owns; then
        // _exit as above.
        unsafe {
            libc::write(
                error_write.as_raw_fd(),
                (&errno as *const i32).cast(),
                std::mem::size_of::<i32>(),
            );
            libc::_exit(127);
        }
    }
    drop((go_read, error_write));
    Ok(HeldChild {
        pid,
        program: shown,
        go,
        exec_error,
    })
}

impl HeldChild {
    /// Its process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Lets it exec its program.
    ///
    /// # Errors
    /// The exec failed (the error names the program and why).
    pub fn release(self) -> Result<Child, Error> {
        let byte = 1u8;
        // SAFETY: writing one byte from a live local to a pipe fd this process owns.
        unsafe { libc::write(self.go.as_raw_fd(), (&byte as *const u8).cast(), 1) };
        drop(self.go);
        let mut errno = 0i32;
        // SAFETY: reading at most 4 bytes into a live i32; the pipe's write end closes at the
        // exec (CLOEXEC), so this returns 0 then.
        let n = unsafe {
            libc::read(
                self.exec_error.as_raw_fd(),
                (&mut errno as *mut i32).cast(),
                std::mem::size_of::<i32>(),
            )
        };
        let mut child = Child {
            pid: self.pid,
            status: None,
        };
        if n == std::mem::size_of::<i32>() as isize {
            let _ = child.wait();
            return Err(Error::Launch(format!(
                "cannot run {}: {}",
                self.program,
                io::Error::from_raw_os_error(errno)
            )));
        }
        Ok(child)
    }
}

impl Child {
    /// Its process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Its exit status (the code, or 128 + the signal that ended it) if it has ended.
    pub fn try_wait(&mut self) -> Option<i32> {
        self.reap(libc::WNOHANG)
    }

    /// Waits for it to end; its exit status as [`Child::try_wait`] gives it.
    pub fn wait(&mut self) -> i32 {
        self.reap(0).unwrap_or(-1)
    }

    fn reap(&mut self, flags: i32) -> Option<i32> {
        if self.status.is_some() {
            return self.status;
        }
        let mut status = 0;
        // SAFETY: waiting for our own child with a valid status pointer.
        let r = unsafe { libc::waitpid(self.pid, &mut status, flags) };
        if r == self.pid {
            self.status = Some(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            });
        } else if r < 0 {
            self.status = Some(-1);
        }
        self.status
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), Error> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::Launch(format!(
            "cannot make a pipe: {}",
            io::Error::last_os_error()
        )));
    }
    // SAFETY: both descriptors were just made and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `program` as execvp would find it: a path if it has a slash, else the first executable
/// file of that name on PATH.
fn resolve(program: &OsStr) -> Option<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        let path = PathBuf::from(program);
        return is_executable(&path).then_some(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
