//! The egress folder: operations write their files here. A name never leaves the folder
//! (a requested name with a path in it is refused; a template's fields are reduced to
//! safe characters), and a file appears under its name only once it is complete: it is
//! written as a hidden `.NAME.partial` and renamed at the end.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{bail, Result};

/// The fields a name template may use.
const FIELDS: [&str; 4] = ["rule", "process", "pid", "time"];

/// The longest name accepted (Linux allows 255 bytes; the `.partial` suffix needs room).
const MAX_NAME: usize = 200;

/// Checks that `template` uses only known fields.
pub(crate) fn check_template(template: &str) -> Result<()> {
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            bail!("name template `{template}`: `{{` without `}}`");
        };
        let field = &rest[open + 1..open + close];
        if !FIELDS.contains(&field) {
            bail!(
                "name template `{template}`: unknown field {{{field}}} (known: {})",
                FIELDS.map(|f| format!("{{{f}}}")).join(", ")
            );
        }
        rest = &rest[open + close + 1..];
    }
    Ok(())
}

/// What a template's fields stand for.
#[derive(Debug)]
pub(crate) struct NameFields<'a> {
    pub(crate) rule: &'a str,
    pub(crate) process: &'a str,
    pub(crate) pid: u32,
    pub(crate) time: SystemTime,
}

/// Fills in a checked template; every field is reduced to `[A-Za-z0-9._-]`.
pub(crate) fn expand(template: &str, fields: &NameFields<'_>) -> String {
    let time = eventpipe_counters::iso8601(fields.time)
        .replace(['-', ':'], "")
        .chars()
        .take(15)
        .collect::<String>();
    let name = template
        .replace("{rule}", &safe(fields.rule))
        .replace("{process}", &safe(fields.process))
        .replace("{pid}", &fields.pid.to_string())
        .replace("{time}", &time);
    safe(&name)
}

/// Keeps letters, digits, `.`, `-` and `_`; anything else becomes `_`, and a leading dot
/// goes (no hidden files, no `..`).
fn safe(text: &str) -> String {
    let s: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let s = s.trim_start_matches('.');
    let s = if s.is_empty() { "unnamed" } else { s };
    s.chars().take(MAX_NAME).collect()
}

/// A name a request asked for: a plain file name, else an error saying why.
pub(crate) fn requested_name(name: &str) -> Result<String> {
    if name.is_empty() || name.len() > MAX_NAME {
        bail!("an egress name has 1 to {MAX_NAME} bytes");
    }
    if name.starts_with('.') || name.contains(['/', '\\', '\0']) || name.contains("..") {
        bail!("egress name `{name}` must be a plain file name (no `/`, `..` or leading `.`)");
    }
    if name.chars().any(|c| c.is_control()) {
        bail!("egress name has control characters");
    }
    Ok(name.to_owned())
}

/// The most numbered variants of one name [`Pending::create_numbered`] tries.
const MAX_NUMBER: u32 = 1000;

/// A file being written into the folder.
#[derive(Debug)]
pub(crate) struct Pending {
    partial: PathBuf,
    done: PathBuf,
}

impl Pending {
    /// Starts `name` in `dir`: the partial file is created (an existing final file of that
    /// name is an error: nothing is overwritten).
    pub(crate) fn create(dir: &Path, name: &str) -> Result<(Pending, std::fs::File)> {
        let done = dir.join(name);
        debug_assert_eq!(done.parent(), Some(dir));
        if done.exists() {
            bail!("{} exists already", done.display());
        }
        let partial = dir.join(format!(".{name}.partial"));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&partial)
            .map_err(|e| anyhow::anyhow!("creating {}: {e}", partial.display()))?;
        Ok((Pending { partial, done }, file))
    }

    /// As [`create`](Self::create), for a name the agent made (a rule's, which can fire
    /// twice within the second its name is stamped with): a name taken, done or still
    /// being written, gets a number before its extension `ext` instead (`-2`, `-3`, ...).
    pub(crate) fn create_numbered(
        dir: &Path,
        name: &str,
        ext: &str,
    ) -> Result<(Pending, std::fs::File)> {
        let stem = name.strip_suffix(ext).unwrap_or(name);
        for n in 1..=MAX_NUMBER {
            let candidate = if n == 1 {
                name.to_owned()
            } else {
                format!("{stem}-{n}{ext}")
            };
            let done = dir.join(&candidate);
            if done.exists() {
                continue;
            }
            let partial = dir.join(format!(".{candidate}.partial"));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&partial)
            {
                Ok(file) => return Ok((Pending { partial, done }, file)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => bail!("creating {}: {e}", partial.display()),
            }
        }
        bail!(
            "{}: {MAX_NUMBER} files of this name and its numbered ones exist already",
            dir.join(name).display()
        )
    }

    /// Where the partial file is.
    pub(crate) fn partial_path(&self) -> &Path {
        &self.partial
    }

    /// The file is complete: it takes its name.
    pub(crate) fn commit(self) -> Result<PathBuf> {
        std::fs::rename(&self.partial, &self.done)
            .map_err(|e| anyhow::anyhow!("renaming {}: {e}", self.partial.display()))?;
        Ok(self.done)
    }

    /// The file will not be complete: it goes.
    pub(crate) fn discard(self) {
        let _ = std::fs::remove_file(&self.partial);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_in_the_folder() {
        let fields = NameFields {
            rule: "../../etc",
            process: "a/b c",
            pid: 7,
            time: SystemTime::UNIX_EPOCH,
        };
        assert_eq!(
            expand("{rule}_{process}_{pid}_{time}", &fields),
            ".._.._etc_a_b_c_7_19700101T000000"
                .trim_start_matches('.')
                .to_owned()
        );
        assert_eq!(expand("{rule}", &fields), "_.._etc");
        assert_eq!(expand("..", &fields), "unnamed");
        for bad in ["../x", "a/b", ".hidden", "x\\y", "", "a\0b", ".."] {
            assert!(requested_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            requested_name("trace-1.nettrace").unwrap(),
            "trace-1.nettrace"
        );
        assert!(check_template("{rule}-{oops}").is_err());
        assert!(check_template("{rule").is_err());
        check_template("{rule}-{process}-{pid}-{time}").unwrap();
    }

    #[test]
    fn a_name_the_agent_made_is_numbered_when_taken() {
        let dir =
            std::env::temp_dir().join(format!("eptrace-egress-numbered-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ext = ".gcdump.nettrace";
        // One still being written, one done: the third gets -3.
        let (first, _) = Pending::create_numbered(&dir, "app_1_rule.gcdump.nettrace", ext).unwrap();
        let (second, _) =
            Pending::create_numbered(&dir, "app_1_rule.gcdump.nettrace", ext).unwrap();
        assert_eq!(
            second.commit().unwrap(),
            dir.join("app_1_rule-2.gcdump.nettrace")
        );
        let (third, _) = Pending::create_numbered(&dir, "app_1_rule.gcdump.nettrace", ext).unwrap();
        assert_eq!(third.done, dir.join("app_1_rule-3.gcdump.nettrace"));
        assert_eq!(first.done, dir.join("app_1_rule.gcdump.nettrace"));
        // A name given by a client is never renumbered.
        assert!(Pending::create(&dir, "app_1_rule-2.gcdump.nettrace").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_appears_only_when_committed() {
        let dir = std::env::temp_dir().join(format!("eptrace-egress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (pending, mut file) = Pending::create(&dir, "x.nettrace").unwrap();
        std::io::Write::write_all(&mut file, b"abc").unwrap();
        assert!(!dir.join("x.nettrace").exists());
        let done = pending.commit().unwrap();
        assert_eq!(std::fs::read(&done).unwrap(), b"abc");
        assert!(Pending::create(&dir, "x.nettrace").is_err());
        let (pending, _) = Pending::create(&dir, "y.nettrace").unwrap();
        pending.discard();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
