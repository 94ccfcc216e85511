//! Geo commands on sorted sets, as Redis's geo.c: `GEOADD GEODIST GEOHASH GEOPOS GEOSEARCH
//! GEOSEARCHSTORE GEORADIUS(_RO) GEORADIUSBYMEMBER(_RO)`. A position is a member whose score is
//! its 52-bit geohash (`crate::geohash`), so a geo set is an ordinary sorted set: it replicates
//! per member (last write wins on each member) like any `ZADD`, and `GEOADD` is `ZADD` with
//! encoded scores (it runs the `ZADD` handler).

use bytes::Bytes;

use super::args::{eq_ignore_case, parse_float};
use super::flags::*;
use super::{CommandSpec, Exec, Keys, TABLE};
use crate::db::zset::{ScoreBound, SortedSet};
use crate::db::Value;
use crate::error::{CmdError, Reply};
use crate::frame::Frame;
use crate::geohash::{self, Search, Shape};
use crate::hlc::Version;

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

/// Which command is searching (Redis's `georadiusGeneric` flags).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Radius { store_allowed: bool },
    ByMember { store_allowed: bool },
    Search,
    SearchStore,
}

fn georadius(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    search(exec, argv, Variant::Radius { store_allowed: true })
}

fn georadius_ro(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    search(exec, argv, Variant::Radius { store_allowed: false })
}

fn georadiusbymember(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    search(exec, argv, Variant::ByMember { store_allowed: true })
}

fn georadiusbymember_ro(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    search(exec, argv, Variant::ByMember { store_allowed: false })
}

fn geosearch(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    search(exec, argv, Variant::Search)
}

fn geosearchstore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    search(exec, argv, Variant::SearchStore)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sort {
    None,
    Asc,
    Desc,
}

/// A point found.
struct Found {
    member: Bytes,
    score: f64,
    lon: f64,
    lat: f64,
    dist: f64,
}

/// What the options asked for.
#[derive(Default)]
struct Options {
    with_dist: bool,
    with_hash: bool,
    with_coord: bool,
    any: bool,
    count: i64,
    store: Option<Bytes>,
    store_dist: bool,
}

fn search(exec: &mut Exec, argv: &[Bytes], variant: Variant) -> Reply {
    let src = if variant == Variant::SearchStore { &argv[2] } else { &argv[1] };
    let mut center: Option<(f64, f64)> = None;
    let mut shape: Option<(Shape, f64)> = None;
    let base = match variant {
        Variant::Radius { .. } => {
            read(exec, src)?;
            center = Some(lon_lat(&argv[2], &argv[3])?);
            let (r, conversion) = distance_args(&argv[4], &argv[5])?;
            shape = Some((Shape::Radius(r), conversion));
            6
        }
        Variant::ByMember { .. } => {
            if let Some(z) = read(exec, src)? {
                center = Some(position(z, &argv[2]).ok_or_else(|| CmdError::err("could not decode requested zset member"))?);
                let (r, conversion) = distance_args(&argv[3], &argv[4])?;
                shape = Some((Shape::Radius(r), conversion));
            }
            5
        }
        Variant::Search => {
            read(exec, src)?;
            2
        }
        Variant::SearchStore => {
            read(exec, src)?;
            3
        }
    };
    let is_search = matches!(variant, Variant::Search | Variant::SearchStore);
    let store_allowed = matches!(variant, Variant::Radius { store_allowed: true } | Variant::ByMember { store_allowed: true });
    let mut o = Options::default();
    if variant == Variant::SearchStore {
        o.store = Some(argv[1].clone());
    }
    let mut sort = Sort::None;
    let (mut from_member, mut from_lonlat, mut by_radius, mut by_box) = (false, false, false, false);
    let rest = &argv[base..];
    let mut i = 0;
    while i < rest.len() {
        let arg = &rest[i];
        let left = rest.len() - i - 1;
        if eq_ignore_case(arg, "withdist") {
            o.with_dist = true;
        } else if eq_ignore_case(arg, "withhash") {
            o.with_hash = true;
        } else if eq_ignore_case(arg, "withcoord") {
            o.with_coord = true;
        } else if eq_ignore_case(arg, "any") {
            o.any = true;
        } else if eq_ignore_case(arg, "asc") {
            sort = Sort::Asc;
        } else if eq_ignore_case(arg, "desc") {
            sort = Sort::Desc;
        } else if eq_ignore_case(arg, "count") && left >= 1 {
            o.count = super::args::int(&rest[i + 1])?;
            if o.count <= 0 {
                return Err(CmdError::err("COUNT must be > 0"));
            }
            i += 1;
        } else if (eq_ignore_case(arg, "store") || eq_ignore_case(arg, "storedist")) && left >= 1 && store_allowed {
            o.store = Some(rest[i + 1].clone());
            o.store_dist = eq_ignore_case(arg, "storedist");
            i += 1;
        } else if eq_ignore_case(arg, "storedist") && variant == Variant::SearchStore {
            o.store_dist = true;
        } else if eq_ignore_case(arg, "frommember") && left >= 1 && is_search && !from_lonlat {
            if let Some(z) = read(exec, src)? {
                center = Some(position(z, &rest[i + 1]).ok_or_else(|| CmdError::err("could not decode requested zset member"))?);
            }
            from_member = true;
            i += 1;
        } else if eq_ignore_case(arg, "fromlonlat") && left >= 2 && is_search && !from_member {
            center = Some(lon_lat(&rest[i + 1], &rest[i + 2])?);
            from_lonlat = true;
            i += 2;
        } else if eq_ignore_case(arg, "byradius") && left >= 2 && is_search && !by_box {
            let (r, conversion) = distance_args(&rest[i + 1], &rest[i + 2])?;
            shape = Some((Shape::Radius(r), conversion));
            by_radius = true;
            i += 2;
        } else if eq_ignore_case(arg, "bybox") && left >= 3 && is_search && !by_radius {
            let width = float_arg(&rest[i + 1], "need numeric width")?;
            let height = float_arg(&rest[i + 2], "need numeric height")?;
            if width < 0.0 || height < 0.0 {
                return Err(CmdError::err("height or width cannot be negative"));
            }
            shape = Some((Shape::Box { width, height }, unit(&rest[i + 3])?));
            by_box = true;
            i += 3;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if o.store.is_some() && (o.with_dist || o.with_hash || o.with_coord) {
        let what = if variant == Variant::SearchStore { "GEOSEARCHSTORE" } else { "STORE option in GEORADIUS" };
        return Err(CmdError::err(format!("{what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options")));
    }
    let name = String::from_utf8_lossy(&argv[0]);
    if is_search && !(from_member || from_lonlat) {
        return Err(CmdError::err(format!("exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}")));
    }
    if is_search && !(by_radius || by_box) {
        return Err(CmdError::err(format!("exactly one of BYRADIUS and BYBOX can be specified for {name}")));
    }
    if o.any && o.count == 0 {
        return Err(CmdError::err("the ANY argument requires COUNT argument"));
    }
    let found = match (read(exec, src)?, center, shape) {
        (Some(z), Some((longitude, latitude)), Some((shape, conversion))) => {
            let search = Search { longitude, latitude, shape, conversion };
            Some((points_in(z, &search, if o.any { o.count as usize } else { 0 }), conversion))
        }
        _ => None,
    };
    let Some((mut found, conversion)) = found else {
        // No source key: an empty reply, or the destination deleted.
        return match &o.store {
            Some(dst) => {
                exec.ctx.delete(dst);
                Ok(Frame::Integer(0))
            }
            None => Ok(Frame::Array(Vec::new())),
        };
    };
    if o.count != 0 && sort == Sort::None && !o.any {
        sort = Sort::Asc;
    }
    match sort {
        Sort::Asc => found.sort_by(|a, b| a.dist.total_cmp(&b.dist)),
        Sort::Desc => found.sort_by(|a, b| b.dist.total_cmp(&a.dist)),
        Sort::None => {}
    }
    if o.count > 0 {
        found.truncate(o.count as usize);
    }
    for f in &mut found {
        f.dist /= conversion;
    }
    match o.store {
        Some(dst) => Ok(Frame::Integer(store(exec, &dst, found, o.store_dist) as i64)),
        None => Ok(Frame::Array(found.into_iter().map(|f| reply_of(f, &o, exec.client.resp)).collect())),
    }
}

/// Every member inside the search, cell by cell in Redis's order (stopping at `limit` if set).
fn points_in(z: &SortedSet, search: &Search, limit: usize) -> Vec<Found> {
    let mut found = Vec::new();
    let mut last: Option<geohash::Cell> = None;
    for cell in search.cells() {
        if cell == geohash::Cell::default() {
            continue;
        }
        // Huge radii make neighbours coincide: skip a cell equal to the last one scanned.
        if last == Some(cell) {
            continue;
        }
        if limit > 0 && found.len() >= limit {
            break;
        }
        let (min, max) = geohash::score_range(cell);
        let range = z.range_by_score(ScoreBound { value: min, exclusive: false }, ScoreBound { value: max, exclusive: true });
        for (member, score) in range {
            if let Some((lon, lat)) = geohash::decode_score(score) {
                if let Some(dist) = search.distance_if_within(lon, lat) {
                    found.push(Found { member: member.clone(), score, lon, lat, dist });
                }
            }
            if limit > 0 && found.len() >= limit {
                break;
            }
        }
        last = Some(cell);
    }
    found
}

fn reply_of(f: Found, o: &Options, resp: u8) -> Frame {
    if !(o.with_dist || o.with_hash || o.with_coord) {
        return Frame::Bulk(f.member);
    }
    let mut item = vec![Frame::Bulk(f.member)];
    if o.with_dist {
        item.push(distance_reply(f.dist));
    }
    if o.with_hash {
        item.push(Frame::Integer(f.score as i64));
    }
    if o.with_coord {
        item.push(Frame::Array(vec![coordinate(f.lon, resp), coordinate(f.lat, resp)]));
    }
    Frame::Array(item)
}

/// Replaces `dst` with the found members (scored by geohash, or by distance for STOREDIST),
/// or deletes it when none were found. Returns how many were stored.
fn store(exec: &mut Exec, dst: &[u8], found: Vec<Found>, by_distance: bool) -> usize {
    let n = found.len();
    if n == 0 {
        exec.ctx.delete(dst);
        return 0;
    }
    // A whole-value write: `put` stamps every member with the write's version.
    let mut z = SortedSet::default();
    for f in found {
        z.insert(f.member, if by_distance { f.dist } else { f.score }, Version::ZERO);
    }
    exec.ctx.put(dst, Value::ZSet(Box::new(z)), false);
    n
}
