//! `CLIENT TRACKING | CACHING | GETREDIR | TRACKINGINFO` (client-side caching, see
//! `crate::tracking`), and what a command hands client-side caching once it ran.

use bytes::Bytes;

use super::{flags, CommandSpec, Exec, Reply};
use crate::client::ClientState;
use crate::db::Modified;
use crate::error::CmdError;
use crate::frame::{Frame, OK};
use crate::parse::parse_i64;
use crate::server::Server;
use crate::tracking::{Options, TrackingError};

impl From<TrackingError> for CmdError {
    fn from(e: TrackingError) -> CmdError {
        CmdError::err(e.to_string())
    }
}

/// `CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p]... [BCAST] [OPTIN] [OPTOUT] [NOLOOP]`,
/// with Redis's checks in Redis's order.
pub fn client_tracking(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let mut options = Options::default();
    let mut i = 3;
    while i < argv.len() {
        let more = i + 1 < argv.len();
        match argv[i].to_ascii_lowercase().as_slice() {
            b"redirect" if more => {
                i += 1;
                if options.redirect != 0 {
                    return Err(CmdError::err("A client can only redirect to a single other client"));
                }
                let id = parse_i64(&argv[i]).ok_or(CmdError::NotInteger)?;
                // The target must exist now, though it may go away later (then the
                // redirection is reported broken).
                if id <= 0 || exec.server.clients.get(id as u64).is_none() {
                    return Err(CmdError::err("The client ID you want redirect to does not exist"));
                }
                options.redirect = id as u64;
            }
            b"bcast" => options.bcast = true,
            b"optin" => options.optin = true,
            b"optout" => options.optout = true,
            b"noloop" => options.noloop = true,
            b"prefix" if more => {
                i += 1;
                options.prefixes.push(argv[i].clone());
            }
            _ => return Err(CmdError::Syntax),
        }
        i += 1;
    }
    let server = exec.server;
    match argv[2].to_ascii_lowercase().as_slice() {
        b"on" => {
            if !options.bcast && !options.prefixes.is_empty() {
                return Err(CmdError::err("PREFIX option requires BCAST mode to be enabled"));
            }
            if options.bcast && (options.optin || options.optout) {
                return Err(CmdError::err("OPTIN and OPTOUT are not compatible with BCAST"));
            }
            if options.optin && options.optout {
                return Err(CmdError::err("You can't use both OPTIN and OPTOUT"));
            }
            server.tracking.enable(&server.store, &exec.client.handle, options)?;
            exec.client.tracking = true;
        }
        b"off" => {
            server.tracking.disable(&server.store, exec.client.id);
            exec.client.tracking = false;
        }
        _ => return Err(CmdError::Syntax),
    }
    Ok(OK)
}

/// `CLIENT CACHING YES|NO`: whether the next command's reads are remembered (OPTIN/OPTOUT).
pub fn client_caching(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let yes = match argv[2].to_ascii_lowercase().as_slice() {
        b"yes" => true,
        b"no" => false,
        _ => return Err(CmdError::Syntax),
    };
    exec.server.tracking.caching(exec.client.id, yes)?;
    Ok(OK)
}

pub fn client_getredir(exec: &mut Exec) -> Reply {
    Ok(Frame::Integer(exec.server.tracking.redirect_of(exec.client.id)))
}

pub fn client_trackinginfo(exec: &mut Exec) -> Reply {
    let info = exec.server.tracking.info(exec.client.id);
    Ok(Frame::Map(vec![
        (Frame::bulk("flags"), Frame::Array(info.flags.into_iter().map(Frame::bulk).collect())),
        (Frame::bulk("redirect"), Frame::Integer(info.redirect)),
        (Frame::bulk("prefixes"), Frame::Array(info.prefixes.into_iter().map(Frame::Bulk).collect())),
    ]))
}

/// Scripts are remembered through the read-only commands they call (`ClientState::script_read`),
/// never by their own flag, as in Redis.
fn is_script(spec: &CommandSpec) -> bool {
    matches!(spec.name, "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro")
}

/// The keys a command read, for the tracking table: a read-only command's keys; a script's
/// declared keys if it called a read-only command. Clears the script's mark.
pub fn read_keys(client: &mut ClientState, spec: &CommandSpec, argv: &[Bytes]) -> Vec<Bytes> {
    let read = if is_script(spec) { std::mem::take(&mut client.script_read) } else { spec.flags & flags::READONLY != 0 };
    if !read {
        return Vec::new();
    }
    spec.key_positions(argv).into_iter().map(|i| argv[i].clone()).collect()
}

/// After a command ran for `client` (call only while `Store::tracking` is on): what it read,
/// what it modified, and whether a `CLIENT CACHING` still holds for the next command.
/// Returns the client's own invalidation messages, to follow the reply.
pub fn after_command(server: &Server, client: &mut ClientState, spec: &CommandSpec, argv: &[Bytes], modified: Modified) -> Vec<Frame> {
    // The common case while others track: a command of a client that does not, which changed
    // nothing. It must not take the tracking lock.
    if !client.tracking && modified.is_empty() && !server.store.has_removed() {
        client.script_read = false;
        client.tracking_reads.clear();
        return Vec::new();
    }
    let mut read = read_keys(client, spec, argv);
    read.append(&mut client.tracking_reads);
    let read: Vec<&[u8]> = read.iter().map(|k| &k[..]).collect();
    // `CLIENT CACHING` applies to the next command, or to a whole transaction.
    let keep_caching = spec.name == "client" || client.multi.is_some();
    server.tracking.after_command(&server.clients, &server.store, client.id, &read, keep_caching, modified)
}

/// `reply` followed (or preceded) by push messages, written together. Inlined: every command
/// passes through here twice, almost always with no pushes, and the call moved the reply in and
/// out (~60 instructions of a GET's).
#[inline]
pub fn with_pushes(before: Vec<Frame>, reply: Frame, after: Vec<Frame>) -> Frame {
    if before.is_empty() && after.is_empty() {
        return reply;
    }
    sequence(before, reply, after)
}

#[cold]
fn sequence(mut frames: Vec<Frame>, reply: Frame, after: Vec<Frame>) -> Frame {
    frames.push(reply);
    frames.extend(after);
    Frame::Sequence(frames)
}
