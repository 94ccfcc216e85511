//! Redis's geohash (geohash.c, geohash_helper.c): 52-bit interleaved cells over longitude
//! -180..180 and latitude -85.05112878..85.05112878 (the Web Mercator limits), stored as
//! sorted-set scores, plus the search-area planning that `GEOSEARCH` uses: the cell at the
//! step that covers the shape and its eight neighbours, with the useless ones dropped. Ported
//! operation for operation, so scores, positions, distances and result order equal Redis's.

pub const LONG_MIN: f64 = -180.0;
pub const LONG_MAX: f64 = 180.0;
pub const LAT_MIN: f64 = -85.051_128_78;
pub const LAT_MAX: f64 = 85.051_128_78;
/// 26 steps of 2 bits: 52 bits, exact in a double score.
pub const STEP_MAX: u8 = 26;
const EARTH_RADIUS_IN_METERS: f64 = 6_372_797.560_856;
const MERCATOR_MAX: f64 = 20_037_726.37;
const D_R: f64 = std::f64::consts::PI / 180.0;

/// A cell: `bits` holds `step * 2` interleaved bits (latitude in the even positions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cell {
    pub bits: u64,
    pub step: u8,
}

impl Cell {
    fn is_zero(&self) -> bool {
        self.bits == 0 && self.step == 0
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Range {
    pub min: f64,
    pub max: f64,
}

/// A cell's extent.
#[derive(Debug, Clone, Copy, Default)]
pub struct Area {
    pub longitude: Range,
    pub latitude: Range,
}

const WGS84_LONG: Range = Range { min: LONG_MIN, max: LONG_MAX };
const WGS84_LAT: Range = Range { min: LAT_MIN, max: LAT_MAX };

fn interleave64(x: u32, y: u32) -> u64 {
    const B: [u64; 5] = [0x5555_5555_5555_5555, 0x3333_3333_3333_3333, 0x0F0F_0F0F_0F0F_0F0F, 0x00FF_00FF_00FF_00FF, 0x0000_FFFF_0000_FFFF];
    const S: [u32; 5] = [1, 2, 4, 8, 16];
    let (mut x, mut y) = (x as u64, y as u64);
    for i in (0..5).rev() {
        x = (x | (x << S[i])) & B[i];
        y = (y | (y << S[i])) & B[i];
    }
    x | (y << 1)
}

fn deinterleave64(interleaved: u64) -> u64 {
    const B: [u64; 6] =
        [0x5555_5555_5555_5555, 0x3333_3333_3333_3333, 0x0F0F_0F0F_0F0F_0F0F, 0x00FF_00FF_00FF_00FF, 0x0000_FFFF_0000_FFFF, 0x0000_0000_FFFF_FFFF];
    const S: [u32; 6] = [0, 1, 2, 4, 8, 16];
    let (mut x, mut y) = (interleaved, interleaved >> 1);
    for i in 0..6 {
        x = (x | (x >> S[i])) & B[i];
        y = (y | (y >> S[i])) & B[i];
    }
    x | (y << 32)
}

/// `geohashEncode`: `None` outside the ranges (or Redis's indexable limits).
pub fn encode(long_range: Range, lat_range: Range, longitude: f64, latitude: f64, step: u8) -> Option<Cell> {
    if step == 0 || step > 32 {
        return None;
    }
    if !(LONG_MIN..=LONG_MAX).contains(&longitude) || !(LAT_MIN..=LAT_MAX).contains(&latitude) {
        return None;
    }
    if latitude < lat_range.min || latitude > lat_range.max || longitude < long_range.min || longitude > long_range.max {
        return None;
    }
    let scale = (1u64 << step) as f64;
    let lat_offset = (latitude - lat_range.min) / (lat_range.max - lat_range.min) * scale;
    let long_offset = (longitude - long_range.min) / (long_range.max - long_range.min) * scale;
    // C converts the doubles to uint32_t (truncation).
    Some(Cell { bits: interleave64(lat_offset as u32, long_offset as u32), step })
}

pub fn encode_wgs84(longitude: f64, latitude: f64, step: u8) -> Option<Cell> {
    encode(WGS84_LONG, WGS84_LAT, longitude, latitude, step)
}

/// `geohashDecode`: the cell's extent (`None` for the zero cell).
pub fn decode(long_range: Range, lat_range: Range, cell: Cell) -> Option<Area> {
    if cell.is_zero() {
        return None;
    }
    let separated = deinterleave64(cell.bits);
    let (lat_scale, long_scale) = (lat_range.max - lat_range.min, long_range.max - long_range.min);
    let (ilat, ilon) = (separated as u32 as f64, (separated >> 32) as u32 as f64);
    let div = (1u64 << cell.step) as f64;
    Some(Area {
        latitude: Range { min: lat_range.min + (ilat / div) * lat_scale, max: lat_range.min + ((ilat + 1.0) / div) * lat_scale },
        longitude: Range { min: long_range.min + (ilon / div) * long_scale, max: long_range.min + ((ilon + 1.0) / div) * long_scale },
    })
}

/// The (longitude, latitude) a 52-bit score stands for: its cell's centre, clamped.
pub fn decode_score(score: f64) -> Option<(f64, f64)> {
    let area = decode(WGS84_LONG, WGS84_LAT, Cell { bits: score as u64, step: STEP_MAX })?;
    let lon = ((area.longitude.min + area.longitude.max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let lat = ((area.latitude.min + area.latitude.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    Some((lon, lat))
}

/// The sorted-set score of a position.
pub fn score_of(longitude: f64, latitude: f64) -> Option<f64> {
    encode_wgs84(longitude, latitude, STEP_MAX).map(|c| align52(c) as f64)
}

pub fn align52(cell: Cell) -> u64 {
    cell.bits << (52 - cell.step as u32 * 2)
}

/// The standard 11-character geohash (latitude -90..90), as `GEOHASH` prints it.
pub fn standard_string(longitude: f64, latitude: f64) -> Option<String> {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let cell = encode(Range { min: -180.0, max: 180.0 }, Range { min: -90.0, max: 90.0 }, longitude, latitude, 26)?;
    Some((0..11).map(|i| if i == 10 { '0' } else { ALPHABET[((cell.bits >> (52 - (i + 1) * 5)) & 0x1f) as usize] as char }).collect())
}

fn move_x(cell: &mut Cell, d: i8) {
    if d == 0 {
        return;
    }
    let mut x = cell.bits & 0xaaaa_aaaa_aaaa_aaaa;
    let y = cell.bits & 0x5555_5555_5555_5555;
    let zz = 0x5555_5555_5555_5555u64 >> (64 - cell.step as u32 * 2);
    if d > 0 {
        x = x.wrapping_add(zz + 1);
    } else {
        x |= zz;
        x = x.wrapping_sub(zz + 1);
    }
    x &= 0xaaaa_aaaa_aaaa_aaaau64 >> (64 - cell.step as u32 * 2);
    cell.bits = x | y;
}

fn move_y(cell: &mut Cell, d: i8) {
    if d == 0 {
        return;
    }
    let x = cell.bits & 0xaaaa_aaaa_aaaa_aaaa;
    let mut y = cell.bits & 0x5555_5555_5555_5555;
    let zz = 0xaaaa_aaaa_aaaa_aaaau64 >> (64 - cell.step as u32 * 2);
    if d > 0 {
        y = y.wrapping_add(zz + 1);
    } else {
        y |= zz;
        y = y.wrapping_sub(zz + 1);
    }
    y &= 0x5555_5555_5555_5555u64 >> (64 - cell.step as u32 * 2);
    cell.bits = x | y;
}

fn moved(cell: Cell, dx: i8, dy: i8) -> Cell {
    let mut c = cell;
    move_x(&mut c, dx);
    move_y(&mut c, dy);
    c
}

/// A search shape: a circle or a box (sizes in the unit of `conversion` meters).
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    Radius(f64),
    Box { width: f64, height: f64 },
}

/// Where a search looks: its centre and unit.
#[derive(Debug, Clone, Copy)]
pub struct Search {
    pub longitude: f64,
    pub latitude: f64,
    pub shape: Shape,
    /// Meters per unit.
    pub conversion: f64,
}

fn estimate_steps_by_radius(mut range_meters: f64, lat: f64) -> u8 {
    if range_meters == 0.0 {
        return 26;
    }
    let mut step: i32 = 1;
    while range_meters < MERCATOR_MAX {
        range_meters *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u8
}

impl Search {
    /// `geohashBoundingBox`: [min lon, min lat, max lon, max lat].
    fn bounding_box(&self) -> [f64; 4] {
        let (half_w, half_h) = match self.shape {
            Shape::Radius(r) => (r, r),
            Shape::Box { width, height } => (width / 2.0, height / 2.0),
        };
        let (height, width) = (self.conversion * half_h, self.conversion * half_w);
        let lat_delta = (height / EARTH_RADIUS_IN_METERS) / D_R;
        let long_delta_top = (width / EARTH_RADIUS_IN_METERS / ((self.latitude + lat_delta) * D_R).cos()) / D_R;
        let long_delta_bottom = (width / EARTH_RADIUS_IN_METERS / ((self.latitude - lat_delta) * D_R).cos()) / D_R;
        let southern = self.latitude < 0.0;
        let delta = if southern { long_delta_bottom } else { long_delta_top };
        [self.longitude - delta, self.latitude - lat_delta, self.longitude + delta, self.latitude + lat_delta]
    }

    /// `geohashCalculateAreasByShapeWGS84`: the cells to scan, in Redis's order (centre, N, S,
    /// E, W, NE, NW, SE, SW), useless neighbours dropped.
    pub fn cells(&self) -> Vec<Cell> {
        let [min_lon, min_lat, max_lon, max_lat] = self.bounding_box();
        let radius_meters = match self.shape {
            Shape::Radius(r) => r,
            Shape::Box { width, height } => ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt(),
        } * self.conversion;
        let mut steps = estimate_steps_by_radius(radius_meters, self.latitude);
        let plan = |steps: u8| {
            let cell = encode(WGS84_LONG, WGS84_LAT, self.longitude, self.latitude, steps).unwrap_or_default();
            let area = decode(WGS84_LONG, WGS84_LAT, cell).unwrap_or_default();
            (cell, area)
        };
        let (mut cell, mut area) = plan(steps);
        let extent = |c: Cell| decode(WGS84_LONG, WGS84_LAT, c).unwrap_or_default();
        let (north, south, east, west) = (extent(moved(cell, 0, 1)), extent(moved(cell, 0, -1)), extent(moved(cell, 1, 0)), extent(moved(cell, -1, 0)));
        let decrease = north.latitude.max < max_lat || south.latitude.min > min_lat || east.longitude.max < max_lon || west.longitude.min > min_lon;
        if steps > 1 && decrease {
            steps -= 1;
            (cell, area) = plan(steps);
        }
        // [centre, N, S, E, W, NE, NW, SE, SW]
        let mut cells = [
            cell,
            moved(cell, 0, 1),
            moved(cell, 0, -1),
            moved(cell, 1, 0),
            moved(cell, -1, 0),
            moved(cell, 1, 1),
            moved(cell, -1, 1),
            moved(cell, 1, -1),
            moved(cell, -1, -1),
        ];
        if steps >= 2 {
            let mut zero = |idx: &[usize]| idx.iter().for_each(|&i| cells[i] = Cell::default());
            if area.latitude.min < min_lat {
                zero(&[2, 8, 7]);
            }
            if area.latitude.max > max_lat {
                zero(&[1, 5, 6]);
            }
            if area.longitude.min < min_lon {
                zero(&[4, 8, 6]);
            }
            if area.longitude.max > max_lon {
                zero(&[3, 7, 5]);
            }
        }
        cells.to_vec()
    }

    /// The distance (meters) from the centre to a point inside the shape, or `None`.
    pub fn distance_if_within(&self, lon: f64, lat: f64) -> Option<f64> {
        match self.shape {
            Shape::Radius(r) => {
                let d = distance(self.longitude, self.latitude, lon, lat);
                (d <= r * self.conversion).then_some(d)
            }
            Shape::Box { width, height } => {
                let (w, h) = (width * self.conversion, height * self.conversion);
                if lat_distance(lat, self.latitude) > h / 2.0 {
                    return None;
                }
                if distance(lon, lat, self.longitude, lat) > w / 2.0 {
                    return None;
                }
                Some(distance(self.longitude, self.latitude, lon, lat))
            }
        }
    }
}

/// The score range `[min, max)` of every position inside `cell`.
pub fn score_range(cell: Cell) -> (f64, f64) {
    let min = align52(cell);
    let max = align52(Cell { bits: cell.bits + 1, step: cell.step });
    (min as f64, max as f64)
}

fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_IN_METERS * (lat2 * D_R - lat1 * D_R).abs()
}

/// Haversine distance in meters, as Redis computes it.
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let (lon1r, lon2r) = (lon1 * D_R, lon2 * D_R);
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let (lat1r, lat2r) = (lat1 * D_R, lat2 * D_R);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_IN_METERS * a.sqrt().asin()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_positions_and_hashes_match_redis() {
        // Palermo and Catania, from Redis's documentation and unit/geo.
        assert_eq!(score_of(13.361389, 38.115556), Some(3_479_099_956_230_698.0));
        assert_eq!(score_of(15.087269, 37.502669), Some(3_479_447_370_796_909.0));
        let (lon, lat) = decode_score(3_479_099_956_230_698.0).unwrap_or_default();
        assert_eq!(format!("{lon:.17} {lat:.17}"), "13.36138933897018433 38.11555639549629859");
        assert_eq!(standard_string(13.361389, 38.115556).as_deref(), Some("sqc8b49rny0"));
        let d = distance(13.361389338970184, 38.1155563954963, 15.087267458438873, 37.50266842333162);
        assert_eq!(format!("{d:.4}"), "166274.1516");
        assert_eq!(score_of(200.0, 10.0), None);
        assert_eq!(score_of(10.0, 86.0), None);
    }
}
