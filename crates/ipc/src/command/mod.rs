//! Commands a client sends and the responses a server gives.

use crate::header::{eventpipe, process, server, set, Header};
use crate::wire::{PayloadReader, PayloadWriter};
use crate::Error;

/// `format` value: the legacy NetPerf format (refused by this project's server).
pub const FORMAT_NETPERF: u32 = 0;
/// `format` value: NetTrace with the V4 object layout (V5 metadata tags included).
pub const FORMAT_NETTRACE: u32 = 1;
/// `format` value: NetTrace V6. An extension of this project's server; .NET runtimes
/// before V6 support refuse it.
pub const FORMAT_NETTRACE_V6: u32 = 2;
/// The rundown keyword `CollectTracing2`/`3` imply when rundown is requested.
pub const DEFAULT_RUNDOWN_KEYWORD: u64 = 0x8002_0139;

pub use crate::error::ServerError;

/// Which events of a provider to keep after the keyword/level filter (`CollectTracing5`+).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EventFilter {
    /// True: keep only `event_ids`; false: keep all but `event_ids`.
    pub enable: bool,
    /// The event ids.
    pub event_ids: Vec<u32>,
}

/// One provider of a `CollectTracing` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderRequest {
    /// Keyword mask.
    pub keywords: u64,
    /// Verbosity (0 = LogAlways ... 5 = Verbose).
    pub level: u32,
    /// Provider name.
    pub name: String,
    /// Filter arguments (`key=value;...`), or empty.
    pub arguments: String,
    /// Event-id filter (sent only by `CollectTracing5`+).
    pub filter: Option<EventFilter>,
}

/// A `CollectTracing` request, in any of its versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectTracing {
    /// 1 to 6: which command carries it.
    pub version: u8,
    /// Buffer budget in MB.
    pub circular_buffer_mb: u32,
    /// [`FORMAT_NETTRACE`] or [`FORMAT_NETTRACE_V6`].
    pub format: u32,
    /// Rundown keyword; 0 means no rundown. Versions 1–3 carry only a flag (version 1:
    /// always on), mapped to [`DEFAULT_RUNDOWN_KEYWORD`].
    pub rundown_keyword: u64,
    /// Whether to capture stacks (always on before version 3).
    pub stackwalk: bool,
    /// The providers.
    pub providers: Vec<ProviderRequest>,
    /// Version 6: 0 = Drop, 1 = Block.
    pub buffering_mode: u32,
}

impl CollectTracing {
    /// A request with the defaults of `dotnet-trace`: 256 MB, NetTrace, rundown, stacks.
    pub fn new(version: u8, providers: Vec<ProviderRequest>) -> Self {
        CollectTracing {
            version,
            circular_buffer_mb: 256,
            format: FORMAT_NETTRACE,
            rundown_keyword: DEFAULT_RUNDOWN_KEYWORD,
            stackwalk: true,
            providers,
            buffering_mode: 0,
        }
    }

    fn command_id(&self) -> Result<u8, Error> {
        Ok(match self.version {
            1 => eventpipe::COLLECT_TRACING,
            2 => eventpipe::COLLECT_TRACING_2,
            3 => eventpipe::COLLECT_TRACING_3,
            4 => eventpipe::COLLECT_TRACING_4,
            5 => eventpipe::COLLECT_TRACING_5,
            6 => eventpipe::COLLECT_TRACING_6,
            v => {
                return Err(Error::malformed(format!(
                    "CollectTracing{v} does not exist"
                )))
            }
        })
    }

    fn encode_payload(&self) -> Vec<u8> {
        let v = self.version;
        let mut w = PayloadWriter::new();
        if v >= 5 {
            w.u32(0); // session type: streaming
        }
        w.u32(self.circular_buffer_mb).u32(self.format);
        match v {
            2 | 3 => {
                w.bool(self.rundown_keyword != 0);
            }
            4.. => {
                w.u64(self.rundown_keyword);
            }
            _ => {}
        }
        if v >= 3 {
            w.bool(self.stackwalk);
        }
        w.u32(self.providers.len() as u32);
        for p in &self.providers {
            w.u64(p.keywords)
                .u32(p.level)
                .string(&p.name)
                .string(&p.arguments);
            if v >= 5 {
                let filter = p.filter.clone().unwrap_or_default();
                w.bool(filter.enable).u32(filter.event_ids.len() as u32);
                for id in filter.event_ids {
                    w.u32(id);
                }
            }
        }
        if v >= 6 {
            w.u32(self.buffering_mode);
        }
        w.into_bytes()
    }

    fn decode(version: u8, payload: &[u8]) -> Result<CollectTracing, Error> {
        let mut r = PayloadReader::new(payload);
        if version >= 5 {
            let session_type = r.u32("session type")?;
            if session_type != 0 {
                return Err(Error::malformed(format!(
                    "session type {session_type} (only 0, streaming, is served)"
                )));
            }
        }
        let circular_buffer_mb = r.u32("circularBufferMB")?;
        let format = r.u32("format")?;
        let rundown_keyword = match version {
            1 => DEFAULT_RUNDOWN_KEYWORD,
            2 | 3 => {
                if r.bool("requestRundown")? {
                    DEFAULT_RUNDOWN_KEYWORD
                } else {
                    0
                }
            }
            _ => r.u64("rundownKeyword")?,
        };
        let stackwalk = if version >= 3 {
            r.bool("requestStackwalk")?
        } else {
            true
        };
        // keywords + level + two empty strings: at least 20 bytes a provider.
        let n = r.count("provider count", 20)?;
        let mut providers = Vec::with_capacity(n);
        for i in 0..n {
            let keywords = r.u64(&format!("provider {i} keywords"))?;
            let level = r.u32(&format!("provider {i} level"))?;
            let name = r.string(&format!("provider {i} name"))?;
            if name.is_empty() {
                return Err(Error::malformed(format!("provider {i} has an empty name")));
            }
            let arguments = r.string(&format!("provider {i} arguments"))?;
            let filter = if version >= 5 {
                let enable = r.bool(&format!("provider {i} filter flag"))?;
                let ids = r.count(&format!("provider {i} filter ids"), 4)?;
                let event_ids = (0..ids)
                    .map(|_| r.u32(&format!("provider {i} filter id")))
                    .collect::<Result<_, _>>()?;
                Some(EventFilter { enable, event_ids })
            } else {
                None
            };
            providers.push(ProviderRequest {
                keywords,
                level,
                name,
                arguments,
                filter,
            });
        }
        let buffering_mode = if version >= 6 {
            r.u32("sessionBufferMode")?
        } else {
            0
        };
        Ok(CollectTracing {
            version,
            circular_buffer_mb,
            format,
            rundown_keyword,
            stackwalk,
            providers,
            buffering_mode,
        })
    }
}

/// A command, as a server receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Start a streaming session.
    CollectTracing(CollectTracing),
    /// Stop the session with this id.
    StopTracing {
        /// The id `CollectTracing` answered with.
        session_id: u64,
    },
    /// Describe the process (`version` 1, 2 or 3).
    ProcessInfo {
        /// Which of the three commands.
        version: u8,
    },
    /// Let a process suspended at startup run.
    ResumeRuntime,
}

impl Request {
    /// The message for this request.
    pub fn encode(&self) -> Result<Vec<u8>, Error> {
        match self {
            Request::CollectTracing(c) => {
                Header::message(set::EVENTPIPE, c.command_id()?, &c.encode_payload())
            }
            Request::StopTracing { session_id } => Header::message(
                set::EVENTPIPE,
                eventpipe::STOP_TRACING,
                &session_id.to_le_bytes(),
            ),
            Request::ProcessInfo { version } => {
                let id = match version {
                    1 => process::PROCESS_INFO,
                    2 => process::PROCESS_INFO_2,
                    3 => process::PROCESS_INFO_3,
                    v => return Err(Error::malformed(format!("ProcessInfo{v} does not exist"))),
                };
                Header::message(set::PROCESS, id, &[])
            }
            Request::ResumeRuntime => Header::message(set::PROCESS, process::RESUME_RUNTIME, &[]),
        }
    }

    /// Decodes the command in `header` with its `payload`. Unknown commands and malformed
    /// payloads give the error code the server must answer with, and a description.
    pub fn decode(header: &Header, payload: &[u8]) -> Result<Request, (ServerError, String)> {
        let unknown = || {
            (
                ServerError::UNKNOWN_COMMAND,
                format!(
                    "unknown command set {:#04x} id {:#04x}",
                    header.command_set, header.command_id
                ),
            )
        };
        let bad = |e: Error| (ServerError::BAD_ENCODING, e.to_string());
        match (header.command_set, header.command_id) {
            (set::EVENTPIPE, eventpipe::STOP_TRACING) => {
                let mut r = PayloadReader::new(payload);
                let session_id = r.u64("sessionId").map_err(bad)?;
                Ok(Request::StopTracing { session_id })
            }
            (set::EVENTPIPE, id @ eventpipe::COLLECT_TRACING..=eventpipe::COLLECT_TRACING_6) => {
                let version = id - eventpipe::COLLECT_TRACING + 1;
                CollectTracing::decode(version, payload)
                    .map(Request::CollectTracing)
                    .map_err(bad)
            }
            (set::PROCESS, process::PROCESS_INFO) => Ok(Request::ProcessInfo { version: 1 }),
            (set::PROCESS, process::PROCESS_INFO_2) => Ok(Request::ProcessInfo { version: 2 }),
            (set::PROCESS, process::PROCESS_INFO_3) => Ok(Request::ProcessInfo { version: 3 }),
            (set::PROCESS, process::RESUME_RUNTIME) => Ok(Request::ResumeRuntime),
            _ => Err(unknown()),
        }
    }
}

/// The answer to `ProcessInfo`, `ProcessInfo2` or `ProcessInfo3`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProcessInfo {
    /// Process id.
    pub process_id: u64,
    /// A GUID unique to this runtime instance.
    pub runtime_cookie: [u8; 16],
    /// Full path of the executable followed by the arguments, space-separated.
    pub command_line: String,
    /// `Linux`, `macOS`, `Windows` or `Unknown`.
    pub os: String,
    /// `x64`, `x86`, `arm64`, `arm32` or `Unknown`.
    pub arch: String,
    /// Version 2+: the entry-point assembly name (for Rust programs: the executable name).
    pub entrypoint_assembly: Option<String>,
    /// Version 2+: the runtime's product version.
    pub runtime_version: Option<String>,
    /// Version 3: the runtime identifier (`linux-x64`...).
    pub runtime_identifier: Option<String>,
}

impl ProcessInfo {
    /// The payload of the `version` response (fields the version lacks are left out).
    pub fn encode(&self, version: u8) -> Vec<u8> {
        let mut w = PayloadWriter::new();
        if version >= 3 {
            w.u32(0); // payload version
        }
        w.u64(self.process_id)
            .guid(&self.runtime_cookie)
            .string(&self.command_line)
            .string(&self.os)
            .string(&self.arch);
        if version >= 2 {
            w.string(self.entrypoint_assembly.as_deref().unwrap_or(""))
                .string(self.runtime_version.as_deref().unwrap_or(""));
        }
        if version >= 3 {
            w.string(self.runtime_identifier.as_deref().unwrap_or(""));
        }
        w.into_bytes()
    }

    /// Decodes the payload of the `version` response.
    pub fn decode(version: u8, payload: &[u8]) -> Result<ProcessInfo, Error> {
        let mut r = PayloadReader::new(payload);
        if version >= 3 {
            r.u32("ProcessInfo3 version")?;
        }
        let mut info = ProcessInfo {
            process_id: r.u64("processId")?,
            runtime_cookie: r.guid("runtimeCookie")?,
            command_line: r.string("commandLine")?,
            os: r.string("OS")?,
            arch: r.string("arch")?,
            ..ProcessInfo::default()
        };
        if version >= 2 {
            info.entrypoint_assembly = Some(r.string("managedEntrypointAssemblyName")?);
            info.runtime_version = Some(r.string("clrProductVersion")?);
        }
        if version >= 3 {
            info.runtime_identifier = Some(r.string("runtimeIdentifier")?);
        }
        Ok(info)
    }
}

/// A server's `OK` response with `payload`.
pub fn ok_response(payload: &[u8]) -> Vec<u8> {
    // Server payloads are built here and are far below the 64 KiB limit.
    Header::message(set::SERVER, server::OK, payload).unwrap_or_default()
}

/// A server's error response.
pub fn error_response(code: ServerError) -> Vec<u8> {
    Header::message(set::SERVER, server::ERROR, &code.0.to_le_bytes()).unwrap_or_default()
}

#[cfg(test)]
mod tests;
