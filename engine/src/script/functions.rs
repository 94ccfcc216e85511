//! Redis 7 functions: libraries loaded with `FUNCTION LOAD "#!lua name=lib ..."`, whose code
//! registers named functions with `redis.register_function`, called with `FCALL`.
//!
//! The libraries are replicated: each library name is an LWW register in the `Store`
//! (`db::functions`), which the mesh, the full sync and the snapshot file carry. The server
//! keeps what it compiled from them, each library's code and what it registered
//! (`Libraries`, rebuilt by `Scripts::sync_functions` when the registers changed); each
//! thread's VM runs a library's code again the first time one of its functions is called
//! there. While
//! a library loads, its code sees only the loading API (`redis.register_function`,
//! `redis.log`, the constants), as in Redis; once loaded, its functions see every global.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use mlua::{Function, Lua, MultiValue, Table, Value};

use super::vm::{Vm, FUNCTION_CHUNK};
use crate::error::CmdError;
use crate::hlc::Version;

/// A registered function's description.
#[derive(Debug, Clone)]
pub struct FunctionInfo {
    pub name: String,
    pub description: Option<String>,
    pub flags: u32,
}

#[derive(Debug)]
pub struct Library {
    pub name: String,
    pub engine: String,
    /// The whole `FUNCTION LOAD` payload, shebang included.
    pub code: Bytes,
    /// Its functions, sorted by name (as `FUNCTION LIST` shows them); a `Callable` names one
    /// by its place here.
    pub functions: Vec<FunctionInfo>,
    /// Changes whenever a library of this name is (re)loaded.
    pub stamp: u64,
    /// The version of the replicated register this library was compiled from
    /// (`db::functions`).
    pub version: Version,
}

impl Library {
    fn new(name: String, code: Bytes, mut functions: Vec<FunctionInfo>, stamp: u64, version: Version) -> Library {
        functions.sort_by(|a, b| a.name.cmp(&b.name));
        Library { name, engine: "LUA".into(), code, functions, stamp, version }
    }
}

/// A function as `FCALL` finds it: its library and its place among the library's functions.
/// Each VM keeps a library's compiled functions in that order (`Vm::function`), so a call
/// finds its function with one lookup of its name here and none there.
#[derive(Debug, Clone)]
pub struct Callable {
    pub library: Arc<Library>,
    pub index: usize,
}

impl Callable {
    pub fn info(&self) -> &FunctionInfo {
        &self.library.functions[self.index]
    }
}

/// What `FUNCTION RESTORE` does with the libraries already loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestorePolicy {
    /// Keep them; a library of the same name fails the restore (the default).
    Append,
    /// Keep them, but replace those of the same name.
    Replace,
    /// Delete them all first.
    Flush,
}

#[derive(Debug, Default)]
pub struct Libraries {
    pub libraries: BTreeMap<String, Arc<Library>>,
    /// Lowercase function name → the function (`find`).
    pub functions: HashMap<String, Callable, foldhash::fast::RandomState>,
    next_stamp: u64,
    /// The store's `functions_generation` this view was compiled from (`Scripts::sync_functions`).
    pub synced: Option<u64>,
    /// Registers that could not be loaded here (their code failed to compile, or a newer
    /// library registers one of their function names): library name → the register's
    /// version, so each is logged and counted once.
    pub failed: HashMap<String, Version>,
}

impl Libraries {
    /// Whether `FUNCTION LOAD` may add library `name` with `functions`, with Redis's errors.
    pub fn check_add(&self, name: &str, functions: &[FunctionInfo], replace: bool) -> Result<(), CmdError> {
        if self.libraries.contains_key(name) && !replace {
            return Err(CmdError::err(format!("Library '{name}' already exists")));
        }
        match self.clash(name, functions) {
            Some(f) => Err(CmdError::err(format!("Function {f} already exists"))),
            None => Ok(()),
        }
    }

    /// Whether `FUNCTION RESTORE` may load `incoming` (each library's name and functions)
    /// under `policy`, with Redis's errors (`libraryJoin`): with APPEND a library that exists
    /// fails; under any policy a library named twice, or a function registered twice or by a
    /// library that stays (any but those replaced; none after a flush), fails.
    pub fn check_restore(&self, incoming: &[(&str, &[FunctionInfo])], policy: RestorePolicy) -> Result<(), CmdError> {
        let mut names = std::collections::HashSet::new();
        for &(name, _) in incoming {
            if !names.insert(name) || (policy == RestorePolicy::Append && self.libraries.contains_key(name)) {
                return Err(CmdError::err(format!("Library {name} already exists")));
            }
        }
        let stays = |library: &str| match policy {
            RestorePolicy::Flush => false,
            RestorePolicy::Replace => !names.contains(library),
            RestorePolicy::Append => true,
        };
        let mut taken: HashSet<String> = self.functions.iter().filter(|(_, c)| stays(&c.library.name)).map(|(f, _)| f.clone()).collect();
        for f in incoming.iter().flat_map(|(_, functions)| functions.iter()) {
            if !taken.insert(f.name.to_ascii_lowercase()) {
                return Err(CmdError::err(format!("Function {} already exists", f.name)));
            }
        }
        Ok(())
    }

    /// A function of `functions` that another library than `name` registers already.
    fn clash<'a>(&self, name: &str, functions: &'a [FunctionInfo]) -> Option<&'a str> {
        functions.iter().find(|f| self.functions.get(&f.name.to_ascii_lowercase()).is_some_and(|c| c.library.name != name)).map(|f| f.name.as_str())
    }

    /// Makes `library`'s functions callable by name. Two of its names that differ only in
    /// case (Redis 7.0 registers both) call the first in its order, as before.
    fn index_functions(&mut self, library: &Arc<Library>) {
        for (index, f) in library.functions.iter().enumerate() {
            self.functions.entry(f.name.to_ascii_lowercase()).or_insert_with(|| Callable { library: library.clone(), index });
        }
    }

    /// Adds a library whose functions were checked by `load` (`FUNCTION LOAD`), compiled
    /// from the register at `version`.
    pub fn add(&mut self, name: String, code: Bytes, functions: Vec<FunctionInfo>, replace: bool, version: Version) -> Result<Arc<Library>, CmdError> {
        self.check_add(&name, &functions, replace)?;
        self.remove(&name);
        self.next_stamp += 1;
        let library = Arc::new(Library::new(name.clone(), code, functions, self.next_stamp, version));
        self.index_functions(&library);
        self.libraries.insert(name, library.clone());
        Ok(library)
    }

    pub fn remove(&mut self, name: &str) -> Option<Arc<Library>> {
        let library = self.libraries.remove(name)?;
        for f in &library.functions {
            self.functions.remove(&f.name.to_ascii_lowercase());
        }
        Some(library)
    }

    pub fn clear(&mut self) {
        self.libraries.clear();
        self.functions.clear();
    }

    /// Rebuilds the callable libraries from the replicated registers' live libraries (name,
    /// code, version): a library compiled from the same version is kept as it is; any other
    /// is compiled by `compile`. Newest first, so when two libraries loaded concurrently on
    /// different nodes register one function name, the newer library loads and the older
    /// does not (its register stays: deleting the newer one brings it back). Every node
    /// holds the same registers once the mesh converged, so every node ends with the same
    /// libraries. Returns the libraries that could not be loaded this time, with why, once
    /// per register version, and whether the callable set changed.
    pub fn rebuild(
        &mut self,
        live: Vec<(String, Bytes, Version)>,
        mut compile: impl FnMut(&[u8]) -> Result<Vec<FunctionInfo>, CmdError>,
    ) -> (Vec<(String, Version, String)>, bool) {
        let mut live = live;
        live.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        let old = std::mem::take(&mut self.libraries);
        self.functions.clear();
        let mut errors = Vec::new();
        for (name, code, version) in live {
            let (functions, kept) = match old.get(&name).filter(|l| l.version == version) {
                Some(l) => (l.functions.clone(), Some(l.clone())),
                None => match compile(&code) {
                    Ok(functions) => (functions, None),
                    Err(e) => {
                        if self.failed.insert(name.clone(), version) != Some(version) {
                            errors.push((name, version, e.to_string()));
                        }
                        continue;
                    }
                },
            };
            if let Some(f) = self.clash(&name, &functions) {
                let why = format!("function {f} is registered by the newer library {}", self.functions[&f.to_ascii_lowercase()].library.name);
                if self.failed.insert(name.clone(), version) != Some(version) {
                    errors.push((name, version, why));
                }
                continue;
            }
            self.failed.remove(&name);
            let library = kept.unwrap_or_else(|| {
                self.next_stamp += 1;
                Arc::new(Library::new(name.clone(), code, functions, self.next_stamp, version))
            });
            self.index_functions(&library);
            self.libraries.insert(name, library);
        }
        let stamps = |m: &BTreeMap<String, Arc<Library>>| m.values().map(|l| l.stamp).collect::<Vec<_>>();
        let changed = stamps(&old) != stamps(&self.libraries);
        (errors, changed)
    }

    /// Function `name`, case-insensitive as in Redis. `FCALL` asks once per call: the name
    /// is lowercased on the stack (names are rarely longer than 64 bytes) and hashed once.
    pub fn find(&self, name: &[u8]) -> Option<&Callable> {
        let mut lower = smallvec::SmallVec::<[u8; 64]>::from_slice(name);
        lower.make_ascii_lowercase();
        // Registered names are ASCII letters, digits and '_': any other bytes name none.
        self.functions.get(std::str::from_utf8(&lower).ok()?)
    }
}

/// A library payload's shebang: `#!<engine> name=<name>`. Returns (engine, name, code).
pub fn parse_metadata(payload: &[u8]) -> Result<(String, String), CmdError> {
    let Some(rest) = payload.strip_prefix(b"#!") else {
        return Err(CmdError::err("Missing library metadata"));
    };
    let Some(end) = rest.iter().position(|&c| c == b'\n') else {
        return Err(CmdError::err("Invalid library metadata"));
    };
    let line = String::from_utf8_lossy(&rest[..end]);
    let words = split_args(&line);
    // Redis splits the whole line ("#!lua") and drops the "#!": "#! name=x" has engine "".
    let (engine, options) = match words.split_first() {
        Some((first, rest)) if !line.starts_with([' ', '\t']) => (first.clone(), rest),
        _ => (String::new(), &words[..]),
    };
    let mut name = None;
    for part in options {
        match part.get(..5) {
            Some(p) if p.eq_ignore_ascii_case("name=") => {
                if name.is_some() {
                    return Err(CmdError::err("Invalid metadata value, name argument was given multiple times"));
                }
                name = Some(part[5..].to_string());
            }
            _ => return Err(CmdError::err(format!("Invalid metadata value given: {part}"))),
        }
    }
    let name = name.ok_or_else(|| CmdError::err("Library name was not given"))?;
    if !valid_name(&name) {
        return Err(CmdError::err("Library names can only contain letters, numbers, or underscores(_) and must be at least one character long"));
    }
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(CmdError::err(format!("Engine '{engine}' not found")));
    }
    Ok((engine, name))
}

/// Splits a shebang line as Redis's `sdssplitargs`: words separated by spaces, with `"..."`
/// and `'...'` quoting anywhere in a word (`name="foo"` is `name=foo`).
fn split_args(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => current.get_or_insert_with(String::new).push(c),
            (None, ' ' | '\t') => words.extend(current.take()),
            (None, '"' | '\'') => {
                quote = Some(c);
                current.get_or_insert_with(String::new);
            }
            (None, c) => current.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(current);
    words
}

pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// What `redis.register_function` collects while a library loads.
pub type Registrations = Rc<RefCell<Option<Vec<(FunctionInfo, Function)>>>>;

/// The `redis` table a library's code sees while it loads.
pub fn create_load_table(lua: &Lua, registrations: Registrations, missing: Function) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "register_function",
        lua.create_function(move |_, args: MultiValue| {
            let mut slot = registrations.borrow_mut();
            let Some(list) = slot.as_mut() else {
                return Err(mlua::Error::runtime("redis.register_function can only be called on FUNCTION LOAD command"));
            };
            let (info, f) = read_registration(args)?;
            if list.iter().any(|(i, _)| i.name == info.name) {
                return Err(mlua::Error::runtime("Function already exists in the library"));
            }
            list.push((info, f));
            Ok(())
        })?,
    )?;
    super::api::add_constants_and_log(lua, &t)?;
    let meta = lua.create_table()?;
    meta.raw_set("__index", missing)?;
    meta.set_readonly(true);
    t.set_metatable(Some(meta))?;
    t.set_readonly(true);
    Ok(t)
}

fn read_registration(args: MultiValue) -> mlua::Result<(FunctionInfo, Function)> {
    let args: Vec<Value> = args.into_iter().collect();
    let err = |m: &str| mlua::Error::runtime(m.to_string());
    let (name, callback, description, flags) = match args.as_slice() {
        [Value::Table(named)] => {
            let (mut name, mut callback, mut description, mut flags) = (None, None, None, 0);
            for pair in named.pairs::<Value, Value>() {
                let (k, v) = pair?;
                let Value::String(k) = k else {
                    return Err(err("named argument key given to redis.register_function is not a string"));
                };
                match k.to_str()?.to_ascii_lowercase().as_str() {
                    "function_name" => match v {
                        Value::String(s) => name = Some(s.to_str()?.to_string()),
                        _ => return Err(err("function_name argument given to redis.register_function must be a string")),
                    },
                    "description" => match v {
                        Value::String(s) => description = Some(s.to_str()?.to_string()),
                        _ => return Err(err("description argument given to redis.register_function must be a string")),
                    },
                    "callback" => match v {
                        Value::Function(f) => callback = Some(f),
                        _ => return Err(err("callback argument given to redis.register_function must be a function")),
                    },
                    "flags" => {
                        let Value::Table(list) = v else {
                            return Err(err("flags argument to redis.register_function must be a table representing function flags"));
                        };
                        for flag in list.sequence_values::<Value>() {
                            let Value::String(flag) = flag? else { return Err(err("unknown flag given")) };
                            flags |= super::flags::parse(flag.to_str()?.to_ascii_lowercase().as_bytes()).ok_or_else(|| err("unknown flag given"))?;
                        }
                    }
                    _ => return Err(err("unknown argument given to redis.register_function")),
                }
            }
            let name = name.ok_or_else(|| err("redis.register_function must get a function name argument"))?;
            let callback = callback.ok_or_else(|| err("redis.register_function must get a callback argument"))?;
            (name, callback, description, flags)
        }
        [_] => return Err(err("calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).")),
        [name, callback] => {
            let Value::String(name) = name else {
                return Err(err("first argument to redis.register_function must be a string"));
            };
            let Value::Function(callback) = callback else {
                return Err(err("second argument to redis.register_function must be a function"));
            };
            (name.to_str()?.to_string(), callback.clone(), None, 0)
        }
        _ => return Err(err("wrong number of arguments to redis.register_function")),
    };
    if !valid_name(&name) {
        return Err(err("Library names can only contain letters, numbers, or underscores(_) and must be at least one character long"));
    }
    Ok((FunctionInfo { name, description, flags }, callback))
}

impl Vm {
    /// Runs a library's code and returns what it registered (`FUNCTION LOAD`, and a VM's
    /// first call of one of its functions).
    pub fn load_library(&mut self, payload: &[u8]) -> Result<Vec<(FunctionInfo, Function)>, CmdError> {
        let end = payload.iter().position(|&c| c == b'\n').unwrap_or(payload.len());
        // The shebang line stays (as an empty line), so line numbers match the payload's.
        let mut code = Vec::with_capacity(payload.len());
        code.push(b'\n');
        code.extend_from_slice(&payload[(end + 1).min(payload.len())..]);
        let compile = |e: mlua::Error| CmdError::err(format!("Error compiling function: {}", super::vm::lua_message(&e)));
        let env = self.lua.create_table().map_err(compile)?;
        let meta = self.lua.create_table().map_err(compile)?;
        let load_redis = self.load_redis.clone();
        let missing = self.missing.clone();
        let index = self
            .lua
            .create_function(move |_, (_, name): (Value, Value)| -> mlua::Result<Value> {
                match &name {
                    Value::String(s) if s.as_bytes().as_ref() == b"redis" => Ok(Value::Table(load_redis.clone())),
                    _ => missing.call((Value::Nil, name)),
                }
            })
            .map_err(compile)?;
        meta.raw_set("__index", index).map_err(compile)?;
        // `_G` is the loading environment itself (Redis 7.0 gives library code no other globals).
        env.raw_set("_G", env.clone()).map_err(compile)?;
        env.set_metatable(Some(meta.clone())).map_err(compile)?;
        env.set_readonly(true);
        let f = self.lua.load(code).set_name(FUNCTION_CHUNK).set_environment(env).into_function().map_err(compile)?;
        *self.registrations.borrow_mut() = Some(Vec::new());
        self.watch.borrow_mut().deadline = Some(std::time::Instant::now() + std::time::Duration::from_millis(500));
        let result = self.protected.call::<MultiValue>((f,));
        self.watch.borrow_mut().deadline = None;
        let registered = self.registrations.borrow_mut().take().unwrap_or_default();
        let mut result: Vec<Value> = result
            .map_err(|e| CmdError::err(format!("Error registering functions: {}", super::run::redis_wording(&super::vm::lua_message(&e)))))?
            .into_iter()
            .collect();
        if matches!(result.first(), Some(Value::Boolean(false))) {
            let err = result.drain(..).nth(1).unwrap_or(Value::Nil);
            return Err(CmdError::err(format!("Error registering functions: {}", super::run::redis_wording(&super::run::error_message(&err)))));
        }
        if registered.is_empty() {
            return Err(CmdError::err("No functions registered"));
        }
        // Loaded: the functions now see every global, `redis` with `call` included, but an
        // `EVAL`'s `KEYS` and `ARGV` (`Vm::function_globals`).
        meta.raw_set("__index", self.function_globals.clone()).map_err(compile)?;
        meta.set_readonly(true);
        Ok(registered)
    }

    /// The function `callable` names, loading its library into this VM if needed.
    pub fn function(&mut self, callable: &Callable) -> Result<Function, CmdError> {
        let library = &callable.library;
        let fresh = self.libraries.get(&library.name).is_some_and(|(stamp, _)| *stamp == library.stamp);
        if !fresh {
            let registered = self.load_library(&library.code)?;
            // In the library's order. Matched by name, not position: the same code registers
            // the same functions (its loading environment holds nothing that could vary), but
            // a mismatch then reads "Function not found", never runs another function.
            let functions = library.functions.iter().map(|info| registered.iter().find(|(r, _)| r.name == info.name).map(|(_, f)| f.clone())).collect();
            self.libraries.insert(library.name.clone(), (library.stamp, functions));
        }
        self.libraries.get(&library.name).and_then(|(_, fs)| fs.get(callable.index)?.clone()).ok_or_else(|| CmdError::err("Function not found"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(hlc: u64) -> Version {
        Version { hlc, node: 1 }
    }

    /// A fake compiler: the code is the list of function names, one per line after the
    /// shebang; `bad` fails to compile.
    fn compile(code: &[u8]) -> Result<Vec<FunctionInfo>, CmdError> {
        let text = String::from_utf8_lossy(code);
        if text.contains("bad") {
            return Err(CmdError::err("Error compiling function: bad"));
        }
        Ok(text.lines().skip(1).map(|n| FunctionInfo { name: n.to_string(), description: None, flags: 0 }).collect())
    }

    fn lib(name: &str, functions: &str, hlc: u64) -> (String, Bytes, Version) {
        (name.to_string(), Bytes::from(format!("#!lua name={name}\n{functions}")), v(hlc))
    }

    #[test]
    fn a_rebuild_loads_newest_first_keeps_what_did_not_change_and_reports_each_failure_once() {
        let mut l = Libraries::default();
        let (errors, changed) = l.rebuild(vec![lib("old", "f\ng", 1), lib("new", "F", 2), lib("broken", "bad", 3)], compile);
        assert!(changed);
        assert_eq!(l.libraries.keys().collect::<Vec<_>>(), ["new"], "the older library clashes on f (names are case-insensitive)");
        assert_eq!(l.find(b"f").map(|c| c.library.name.clone()), Some("new".into()));
        assert_eq!(errors.iter().map(|(n, _, _)| n.as_str()).collect::<Vec<_>>(), ["broken", "old"]);
        let stamp = l.libraries["new"].stamp;

        let mut compiled = Vec::new();
        let (errors, changed) = l.rebuild(vec![lib("old", "f\ng", 1), lib("new", "F", 2), lib("broken", "bad", 3)], |code| {
            compiled.push(String::from_utf8_lossy(code).lines().next().unwrap_or_default().to_string());
            compile(code)
        });
        assert_eq!(compiled, ["#!lua name=broken", "#!lua name=old"], "only what did not load is tried again");
        assert!(errors.is_empty(), "each failure is reported once per version");
        assert!(!changed);
        assert_eq!(l.libraries["new"].stamp, stamp, "an unchanged library keeps its compiled form");

        // The newer library is deleted: the older one loads.
        let (errors, changed) = l.rebuild(vec![lib("old", "f\ng", 1), lib("broken", "bad", 3)], compile);
        assert!(changed && errors.is_empty());
        assert_eq!(l.find(b"g").map(|c| c.library.name.clone()), Some("old".into()));
        assert_eq!(l.libraries.keys().collect::<Vec<_>>(), ["old"]);
    }

    /// `find` names a function by its library and its place in the library's sorted list,
    /// case-insensitively; two names of one library that differ only in case (Redis 7.0.15
    /// registers both) find the first in that order; a replaced library's functions are
    /// found in the new one, a deleted one's not at all, and no other bytes name a function.
    #[test]
    fn find_names_a_function_by_library_and_place() {
        let mut l = Libraries::default();
        let code = |names: &str| Bytes::from(format!("#!lua name=lib\n{names}"));
        let info = |names: &[&str]| names.iter().map(|n| FunctionInfo { name: n.to_string(), description: None, flags: 0 }).collect::<Vec<_>>();
        l.add("lib".into(), code("zeta\nf\nF\nalpha"), info(&["zeta", "f", "F", "alpha"]), false, v(1)).unwrap();
        let names = |l: &Libraries, find: &[u8]| l.find(find).map(|c| (c.index, c.info().name.clone()));
        assert_eq!(names(&l, b"ALPHA"), Some((1, "alpha".into())), "sorted: F, alpha, f, zeta");
        assert_eq!(names(&l, b"f"), Some((0, "F".into())), "the first of two names differing in case");
        assert_eq!(names(&l, b"Zeta"), Some((3, "zeta".into())));
        assert_eq!(names(&l, b"zeta\xff"), None);
        assert_eq!(names(&l, b"missing"), None);

        let old = l.find(b"zeta").unwrap().library.stamp;
        l.add("lib".into(), code("zeta\nbeta"), info(&["zeta", "beta"]), true, v(2)).unwrap();
        let zeta = l.find(b"zeta").unwrap();
        assert_eq!((zeta.index, zeta.library.stamp != old), (1, true), "found in the replacing library");
        assert_eq!(names(&l, b"alpha"), None, "a function the replacing library dropped");
        l.remove("lib");
        assert_eq!(names(&l, b"zeta"), None);
        assert!(l.functions.is_empty());
    }
}
