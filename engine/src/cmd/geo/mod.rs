//! Geo commands on sorted sets, as Redis's geo.c: `GEOADD GEODIST GEOHASH GEOPOS GEOSEARCH
//! GEOSEARCHSTORE GEORADIUS(_RO) GEORADIUSBYMEMBER(_RO)`. A position is a member whose score is
//! its 52-bit geohash (`crate::geohash`), so a geo set is an ordinary sorted set: it replicates
//! per member (last write wins on each member) like any `ZADD`, and `GEOADD` is `ZADD` with
//! encoded scores (it runs the `ZADD` handler).

use bytes::Bytes;

use super::args::{eq_ignore_case, parse_float};
use super::flags::*;
use super::{CommandSpec, Exec, Keys, TABLE};
use crate::db::zset::SortedSet;
use crate::db::Value;
use crate::error::{CmdError, Reply};
use crate::frame::Frame;
use crate::geohash;

mod search;

use search::{georadius, georadius_ro, georadiusbymember, georadiusbymember_ro, geosearch, geosearchstore};

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $run:expr, $summary:literal) => {
        CommandSpec { name: $name, arity: $arity, flags: $flags, keys: $keys, run: $run, group: "geo", summary: $summary }
    };
}

pub const COMMANDS: &[CommandSpec] = &[
    spec!(
        "geoadd",
        -5,
        WRITE | DENYOOM,
        Keys::Range(1, 1, 1),
        geoadd,
        "Adds one or more members to a geospatial index. The key is created if it doesn't exist."
    ),
    spec!("geodist", -4, READONLY, Keys::Range(1, 1, 1), geodist, "Returns the distance between two members of a geospatial index."),
    spec!("geohash", -2, READONLY, Keys::Range(1, 1, 1), geohash_cmd, "Returns members from a geospatial index as geohash strings."),
    spec!("geopos", -2, READONLY, Keys::Range(1, 1, 1), geopos, "Returns the longitude and latitude of members from a geospatial index."),
    spec!(
        "georadius",
        -6,
        WRITE | DENYOOM,
        Keys::Custom(radius_keys),
        georadius,
        "Queries a geospatial index for members within a distance from a coordinate, optionally stores the result."
    ),
    spec!(
        "georadius_ro",
        -6,
        READONLY,
        Keys::Range(1, 1, 1),
        georadius_ro,
        "Returns members from a geospatial index that are within a distance from a coordinate."
    ),
    spec!(
        "georadiusbymember",
        -5,
        WRITE | DENYOOM,
        Keys::Custom(by_member_keys),
        georadiusbymember,
        "Queries a geospatial index for members within a distance from a member, optionally stores the result."
    ),
    spec!(
        "georadiusbymember_ro",
        -5,
        READONLY,
        Keys::Range(1, 1, 1),
        georadiusbymember_ro,
        "Returns members from a geospatial index that are within a distance from a member."
    ),
    spec!("geosearch", -7, READONLY, Keys::Range(1, 1, 1), geosearch, "Queries a geospatial index for members inside an area of a box or a circle."),
    spec!(
        "geosearchstore",
        -8,
        WRITE | DENYOOM,
        Keys::Range(1, 2, 1),
        geosearchstore,
        "Queries a geospatial index for members inside an area of a box or a circle, optionally stores the result."
    ),
];

/// The source key and a `STORE`/`STOREDIST` destination, if any (options start at `from`).
fn store_keys(argv: &[Bytes], from: usize) -> Vec<usize> {
    let mut keys = vec![1];
    let mut i = from;
    while i + 1 < argv.len() {
        if eq_ignore_case(&argv[i], "store") || eq_ignore_case(&argv[i], "storedist") {
            keys.push(i + 1);
            i += 1;
        }
        i += 1;
    }
    keys
}

fn radius_keys(argv: &[Bytes]) -> Vec<usize> {
    store_keys(argv, 6)
}

fn by_member_keys(argv: &[Bytes]) -> Vec<usize> {
    store_keys(argv, 5)
}

fn float_arg(arg: &[u8], message: &str) -> Result<f64, CmdError> {
    parse_float(arg).filter(|f| !f.is_nan()).ok_or_else(|| CmdError::err(message))
}

/// A longitude/latitude pair within Redis's limits.
fn lon_lat(lon: &[u8], lat: &[u8]) -> Result<(f64, f64), CmdError> {
    let (lon, lat) = (float_arg(lon, "value is not a valid float")?, float_arg(lat, "value is not a valid float")?);
    if !(geohash::LONG_MIN..=geohash::LONG_MAX).contains(&lon) || !(geohash::LAT_MIN..=geohash::LAT_MAX).contains(&lat) {
        return Err(CmdError::err(format!("invalid longitude,latitude pair {lon:.6},{lat:.6}")));
    }
    Ok((lon, lat))
}

/// Meters per unit.
fn unit(arg: &[u8]) -> Result<f64, CmdError> {
    let table = [("m", 1.0), ("km", 1000.0), ("ft", 0.3048), ("mi", 1609.34)];
    table
        .iter()
        .find(|(name, _)| eq_ignore_case(arg, name))
        .map(|(_, m)| *m)
        .ok_or_else(|| CmdError::err("unsupported unit provided. please use M, KM, FT, MI"))
}

/// `radius unit` → (radius, meters per unit).
fn distance_args(radius: &[u8], unit_arg: &[u8]) -> Result<(f64, f64), CmdError> {
    let r = float_arg(radius, "need numeric radius")?;
    if r < 0.0 {
        return Err(CmdError::err("radius cannot be negative"));
    }
    Ok((r, unit(unit_arg)?))
}

fn read<'e>(exec: &'e mut Exec<'_, '_>, key: &[u8]) -> Result<Option<&'e SortedSet>, CmdError> {
    match exec.ctx.lookup_read(key).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::ZSet(z)) => Ok(Some(z)),
        Some(_) => Err(CmdError::WrongType),
    }
}

fn position(z: &SortedSet, member: &[u8]) -> Option<(f64, f64)> {
    z.score(member).and_then(geohash::decode_score)
}

/// Redis's `%.17Lf` with trailing zeros removed (`addReplyHumanLongDouble`); a RESP3 double.
fn coordinate(value: f64, resp: u8) -> Frame {
    if resp >= 3 {
        return Frame::Double(value);
    }
    let mut text = format!("{value:.17}");
    if text.contains('.') {
        text = text.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    if text == "-0" {
        text = "0".into();
    }
    Frame::Bulk(Bytes::from(text))
}

/// Redis's `fixedpoint_d2string(d, 4)`: a distance with four decimals.
fn distance_reply(d: f64) -> Frame {
    let scaled = (d * 10_000.0).round_ties_even() as i64;
    let sign = if scaled < 0 { "-" } else { "" };
    let abs = scaled.unsigned_abs();
    Frame::Bulk(Bytes::from(format!("{sign}{}.{:04}", abs / 10_000, abs % 10_000)))
}

fn geoadd(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let (mut nx, mut xx) = (false, false);
    let mut first = 2;
    while first < argv.len() {
        let opt = &argv[first];
        if eq_ignore_case(opt, "nx") {
            nx = true;
        } else if eq_ignore_case(opt, "xx") {
            xx = true;
        } else if !eq_ignore_case(opt, "ch") {
            break;
        }
        first += 1;
    }
    if !(argv.len() - first).is_multiple_of(3) || (nx && xx) {
        return Err(CmdError::Syntax);
    }
    let mut zadd_argv: Vec<Bytes> = vec![Bytes::from_static(b"zadd")];
    zadd_argv.extend(argv[1..first].iter().cloned());
    for triple in argv[first..].chunks_exact(3) {
        let (lon, lat) = lon_lat(&triple[0], &triple[1])?;
        let score = geohash::score_of(lon, lat).ok_or_else(|| CmdError::err(format!("invalid longitude,latitude pair {lon:.6},{lat:.6}")))?;
        zadd_argv.push(Bytes::from((score as u64).to_string()));
        zadd_argv.push(triple[2].clone());
    }
    let zadd = TABLE.find(b"zadd").map(|i| TABLE.specs[i].run).ok_or_else(|| CmdError::err("zadd is missing"))?;
    zadd(exec, &zadd_argv)
}

fn geodist(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let to_meters = match argv.len() {
        4 => 1.0,
        5 => unit(&argv[4])?,
        _ => return Err(CmdError::Syntax),
    };
    let Some(z) = read(exec, &argv[1])? else { return Ok(Frame::Null) };
    match (position(z, &argv[2]), position(z, &argv[3])) {
        (Some((lon1, lat1)), Some((lon2, lat2))) => Ok(distance_reply(geohash::distance(lon1, lat1, lon2, lat2) / to_meters)),
        _ => Ok(Frame::Null),
    }
}

fn geohash_cmd(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let z = read(exec, &argv[1])?;
    let items = argv[2..]
        .iter()
        .map(|m| z.and_then(|z| position(z, m)).and_then(|(lon, lat)| geohash::standard_string(lon, lat)).map_or(Frame::Null, |s| Frame::Bulk(Bytes::from(s))));
    Ok(Frame::Array(items.collect()))
}

fn geopos(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    let resp = exec.client.resp;
    let z = read(exec, &argv[1])?;
    let items = argv[2..].iter().map(|m| match z.and_then(|z| position(z, m)) {
        Some((lon, lat)) => Frame::Array(vec![coordinate(lon, resp), coordinate(lat, resp)]),
        None => Frame::NullArray,
    });
    Ok(Frame::Array(items.collect()))
}
