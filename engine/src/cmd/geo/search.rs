//! The search commands (Redis's `georadiusGeneric`): `GEOSEARCH`, `GEOSEARCHSTORE`,
//! `GEORADIUS`, `GEORADIUSBYMEMBER` and their `_RO` forms. Arguments are checked in Redis's
//! order (so the same bad input gets the same error), then the cells `geohash::Search` plans
//! are scanned in Redis's order, filtered by the exact shape, sorted if asked, and replied or
//! stored.

use bytes::Bytes;

use super::{coordinate, distance_args, distance_reply, float_arg, lon_lat, position, read, unit};
use crate::cmd::args::{eq_ignore_case, int};
use crate::cmd::Exec;
use crate::db::zset::{ScoreBound, SortedSet};
use crate::db::Value;
use crate::error::{CmdError, Reply};
use crate::frame::Frame;
use crate::geohash::{self, Search, Shape};
use crate::hlc::Version;
use crate::notify::class;

/// Which command is searching (Redis's `georadiusGeneric` flags).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Radius { store_allowed: bool },
    ByMember { store_allowed: bool },
    Search,
    SearchStore,
}

pub(super) fn georadius(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    search(exec, argv, Variant::Radius { store_allowed: true })
}

pub(super) fn georadius_ro(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    search(exec, argv, Variant::Radius { store_allowed: false })
}

pub(super) fn georadiusbymember(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    search(exec, argv, Variant::ByMember { store_allowed: true })
}

pub(super) fn georadiusbymember_ro(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    search(exec, argv, Variant::ByMember { store_allowed: false })
}

pub(super) fn geosearch(exec: &mut Exec, argv: &[Bytes]) -> Reply {
    search(exec, argv, Variant::Search)
}

pub(super) fn geosearchstore(exec: &mut Exec, argv: &[Bytes]) -> Reply {
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

/// A parsed search: where, what shape, and what to do with the result.
struct Query {
    center: Option<(f64, f64)>,
    /// The shape and its unit (meters per unit).
    shape: Option<(Shape, f64)>,
    options: Options,
    sort: Sort,
}

fn search(exec: &mut Exec, argv: &[Bytes], variant: Variant) -> Reply {
    let src = if variant == Variant::SearchStore { &argv[2] } else { &argv[1] };
    let Query { center, shape, options: o, mut sort } = parse(exec, argv, variant)?;
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
                if exec.ctx.delete(dst) {
                    exec.ctx.notify(class::GENERIC, "del", dst);
                }
                Ok(Frame::Integer(0))
            }
            None => Ok(Frame::Array(Vec::new())),
        };
    };
    // COUNT without an order means the closest ones (ANY excepted).
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
        Some(dst) => {
            let event = if matches!(variant, Variant::SearchStore) { "geosearchstore" } else { "georadiusstore" };
            Ok(Frame::Integer(store(exec, &dst, found, o.store_dist, event) as i64))
        }
        None => Ok(Frame::Array(found.into_iter().map(|f| reply_of(f, &o, exec.client.resp)).collect())),
    }
}

/// Checks and reads the arguments in Redis's order: the source's type, the fixed arguments of
/// the variant, then the options, then their combinations.
fn parse(exec: &mut Exec, argv: &[Bytes], variant: Variant) -> Result<Query, CmdError> {
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
            o.count = int(&rest[i + 1])?;
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
    Ok(Query { center, shape, options: o, sort })
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
                    found.push(Found { member: member.to_bytes(), score, lon, lat, dist });
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
fn store(exec: &mut Exec, dst: &[u8], found: Vec<Found>, by_distance: bool, event: &'static str) -> usize {
    let n = found.len();
    if n == 0 {
        if exec.ctx.delete(dst) {
            exec.ctx.notify(class::GENERIC, "del", dst);
        }
        return 0;
    }
    // A whole-value write: `put` stamps every member with the write's version.
    let mut z = SortedSet::default();
    for f in found {
        z.insert(f.member, if by_distance { f.dist } else { f.score }, Version::ZERO);
    }
    exec.ctx.put(dst, Value::ZSet(Box::new(z)), false);
    exec.ctx.notify(class::ZSET, event, dst);
    n
}
