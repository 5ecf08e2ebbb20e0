//! What a session asks of a provider, and what a writer does when the session's memory
//! runs out: the parts of a session's configuration the write path reads.

use crate::provider::Level;
use crate::Error;

/// One provider a session enables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// Provider name (matched case-insensitively).
    pub name: String,
    /// Keyword mask; an event is recorded if it has no keywords or shares one.
    pub keywords: u64,
    /// Most verbose level recorded.
    pub level: Level,
    /// Filter arguments passed to the provider's enable callback.
    pub filter_args: Option<String>,
}

impl ProviderConfig {
    /// All keywords at `Verbose` level.
    pub fn new(name: impl Into<String>) -> Self {
        ProviderConfig {
            name: name.into(),
            keywords: u64::MAX,
            level: Level::Verbose,
            filter_args: None,
        }
    }

    /// Parses `Name[:Keywords[:Level[:FilterArgs]]]`, the dotnet-trace syntax. Keywords are
    /// hex (`0x` optional) or `*`; the level is 0-5 or a name (`informational`, ...).
    pub fn parse(spec: &str) -> Result<Self, Error> {
        let bad = |why: String| Error::InvalidProviderSpec {
            spec: spec.to_string(),
            reason: why,
        };
        let mut parts = spec.splitn(4, ':');
        let name = parts.next().unwrap_or("").trim();
        if name.is_empty() {
            return Err(bad("the provider name is empty".into()));
        }
        let mut config = ProviderConfig::new(name);
        if let Some(kw) = parts.next().map(str::trim).filter(|k| !k.is_empty()) {
            config.keywords = if kw == "*" {
                u64::MAX
            } else {
                let hex = kw
                    .strip_prefix("0x")
                    .or_else(|| kw.strip_prefix("0X"))
                    .unwrap_or(kw);
                u64::from_str_radix(hex, 16)
                    .map_err(|_| bad(format!("keywords `{kw}` are not a hex number")))?
            };
        }
        if let Some(level) = parts.next().map(str::trim).filter(|l| !l.is_empty()) {
            config.level = match level.to_ascii_lowercase().as_str() {
                "0" | "logalways" => Level::LogAlways,
                "1" | "critical" => Level::Critical,
                "2" | "error" => Level::Error,
                "3" | "warning" => Level::Warning,
                "4" | "informational" => Level::Informational,
                "5" | "verbose" => Level::Verbose,
                _ => return Err(bad(format!("level `{level}` is not 0-5 or a level name"))),
            };
        }
        config.filter_args = parts.next().map(str::to_string);
        Ok(config)
    }

    /// Whether an event with these attributes is recorded under this configuration.
    #[doc(hidden)]
    pub fn enables(&self, level: Level, keywords: u64) -> bool {
        let level_ok =
            level == Level::LogAlways || level <= self.level || self.level == Level::LogAlways;
        let keywords_ok = keywords == 0 || keywords & self.keywords != 0;
        level_ok && keywords_ok
    }
}

/// What a writer does when the session's buffer budget is exhausted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferingMode {
    /// Drop the event and count it; memory stays bounded and writers never wait.
    Drop,
    /// Park until the drain frees a buffer; no event is lost unless the session ends.
    Block,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_specs_parse_like_dotnet_trace() {
        let c = ProviderConfig::parse("Microsoft-Windows-DotNETRuntime:0x1:4").unwrap();
        assert_eq!(
            (c.name.as_str(), c.keywords, c.level),
            ("Microsoft-Windows-DotNETRuntime", 1, Level::Informational)
        );
        let c = ProviderConfig::parse("Demo").unwrap();
        assert_eq!(
            (c.keywords, c.level, c.filter_args),
            (u64::MAX, Level::Verbose, None)
        );
        let c = ProviderConfig::parse("Demo:*:verbose:Interval=1;Mode=x:y").unwrap();
        assert_eq!(c.filter_args.as_deref(), Some("Interval=1;Mode=x:y"));
        for bad in ["", ":1", "Demo:xyz", "Demo:1:9", "Demo:1:loud"] {
            let err = ProviderConfig::parse(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("`{bad}`")), "{err}");
        }
    }

    #[test]
    fn level_and_keyword_filtering() {
        let c = ProviderConfig {
            keywords: 0b10,
            level: Level::Warning,
            ..ProviderConfig::new("P")
        };
        assert!(c.enables(Level::Error, 0b10));
        assert!(c.enables(Level::Warning, 0));
        assert!(!c.enables(Level::Informational, 0b10));
        assert!(!c.enables(Level::Error, 0b01));
        assert!(c.enables(Level::LogAlways, 0b11));
    }
}
