//! Redis 7 functions: libraries loaded with `FUNCTION LOAD "#!lua name=lib ..."`, whose code
//! registers named functions with `redis.register_function`, called with `FCALL`.
//!
//! The server keeps each library's code and what it registered (`Libraries`); each thread's
//! VM runs a library's code again the first time one of its functions is called there. While
//! a library loads, its code sees only the loading API (`redis.register_function`,
//! `redis.log`, the constants), as in Redis; once loaded, its functions see every global.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use mlua::{Function, Lua, MultiValue, Table, Value};

use super::vm::{Vm, FUNCTION_CHUNK};
use crate::error::CmdError;

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
    pub functions: BTreeMap<String, FunctionInfo>,
    /// Changes whenever a library of this name is (re)loaded.
    pub stamp: u64,
}

#[derive(Debug, Default)]
pub struct Libraries {
    pub libraries: BTreeMap<String, Arc<Library>>,
    /// Lowercase function name → library name.
    pub functions: HashMap<String, String>,
    next_stamp: u64,
}

impl Libraries {
    /// Adds a library whose functions were checked by `load` (`FUNCTION LOAD`).
    pub fn add(&mut self, name: String, code: Bytes, functions: Vec<FunctionInfo>, replace: bool) -> Result<Arc<Library>, CmdError> {
        if self.libraries.contains_key(&name) && !replace {
            return Err(CmdError::err(format!("Library '{name}' already exists")));
        }
        for f in &functions {
            if self.functions.get(&f.name.to_ascii_lowercase()).is_some_and(|lib| *lib != name) {
                return Err(CmdError::err(format!("Function {} already exists", f.name)));
            }
        }
        self.remove(&name);
        self.next_stamp += 1;
        for f in &functions {
            self.functions.insert(f.name.to_ascii_lowercase(), name.clone());
        }
        let library = Arc::new(Library {
            name: name.clone(),
            engine: "LUA".into(),
            code,
            functions: functions.into_iter().map(|f| (f.name.clone(), f)).collect(),
            stamp: self.next_stamp,
        });
        self.libraries.insert(name, library.clone());
        Ok(library)
    }

    pub fn remove(&mut self, name: &str) -> Option<Arc<Library>> {
        let library = self.libraries.remove(name)?;
        for f in library.functions.keys() {
            self.functions.remove(&f.to_ascii_lowercase());
        }
        Some(library)
    }

    pub fn clear(&mut self) {
        self.libraries.clear();
        self.functions.clear();
    }

    /// The library that holds function `name`, and the function's flags.
    /// Function names are case-insensitive, as in Redis.
    pub fn find(&self, name: &str) -> Option<(Arc<Library>, FunctionInfo)> {
        let library = self.libraries.get(self.functions.get(&name.to_ascii_lowercase())?)?.clone();
        let info = library.functions.values().find(|f| f.name.eq_ignore_ascii_case(name))?.clone();
        Some((library, info))
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
        // Loaded: the functions now see every global, `redis` with `call` included.
        meta.raw_set("__index", self.globals.clone()).map_err(compile)?;
        meta.set_readonly(true);
        Ok(registered)
    }

    /// The function `name` of `library`, loading the library into this VM if needed.
    pub fn function(&mut self, library: &Library, name: &str) -> Result<Function, CmdError> {
        let fresh = self.libraries.get(&library.name).is_some_and(|(stamp, _)| *stamp == library.stamp);
        if !fresh {
            let registered = self.load_library(&library.code)?;
            let functions = registered.into_iter().map(|(info, f)| (info.name, f)).collect();
            self.libraries.insert(library.name.clone(), (library.stamp, functions));
        }
        self.libraries.get(&library.name).and_then(|(_, fs)| fs.get(name)).cloned().ok_or_else(|| CmdError::err("Function not found"))
    }
}
