//! Black-box test of `INFO errorstats`, `total_error_replies` and the error counters of
//! `INFO commandstats`, as Redis 7.0 reports them.

#![allow(clippy::unwrap_used)]

mod support;

use support::{Reply, Server};

fn info(conn: &mut support::Conn, section: &str) -> String {
    let Reply::Bulk(text) = conn.cmd(&["INFO", section]) else { panic!("INFO {section}") };
    String::from_utf8(text).unwrap()
}

#[test]
fn error_replies_count_by_code_in_info() {
    // Proves each error reply counts once under its first word (a failed command, a refused
    // one, a script's own code, an error inside EXEC), the total in INFO stats, failed and
    // rejected calls per command, and CONFIG RESETSTAT clearing them.
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.cmd(&["SET", "s", "text"]);
    assert!(c.cmd(&["INCR", "s"]).is_error());
    assert!(c.cmd(&["LPUSH", "s", "x"]).is_error());
    assert!(c.cmd(&["GET"]).is_error());
    assert!(c.cmd(&["EVAL", "return redis.error_reply('MY_CODE custom')", "0"]).is_error());
    c.cmd(&["MULTI"]);
    c.cmd(&["INCR", "s"]);
    let Reply::Array(replies) = c.cmd(&["EXEC"]) else { panic!("EXEC") };
    assert!(replies[0].is_error());

    let errors = info(&mut c, "errorstats");
    assert!(errors.contains("errorstat_ERR:count=3\r\n"), "{errors}");
    assert!(errors.contains("errorstat_WRONGTYPE:count=1\r\n"), "{errors}");
    assert!(errors.contains("errorstat_MY_CODE:count=1\r\n"), "{errors}");
    assert!(info(&mut c, "stats").contains("total_error_replies:5\r\n"));
    let commands = info(&mut c, "commandstats");
    assert!(commands.contains("cmdstat_incr:calls=2,") && commands.contains("rejected_calls=0,failed_calls=2"), "{commands}");
    assert!(commands.contains("cmdstat_get:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0"), "{commands}");
    assert!(info(&mut c, "default").contains("# Errorstats"));

    assert_eq!(c.cmd(&["CONFIG", "RESETSTAT"]).text(), "OK");
    assert_eq!(info(&mut c, "errorstats"), "# Errorstats\r\n\r\n");
    assert!(info(&mut c, "stats").contains("total_error_replies:0\r\n"));
}

#[test]
fn a_subcommand_arity_error_is_a_rejected_call_as_in_redis() {
    // Proves a subcommand's wrong number of arguments counts as Redis 7.0 counts it: Redis
    // checks a subcommand's arity before calling it, so INFO commandstats shows a rejected
    // call (and no call, no failed call), while a subcommand that runs and fails is a failed
    // call.
    let server = Server::start(&[]);
    let mut c = server.connect();
    let reply = c.cmd(&["CLIENT", "SETNAME"]);
    assert_eq!(reply.text(), "ERR wrong number of arguments for 'client|setname' command");
    assert!(c.cmd(&["OBJECT", "ENCODING"]).is_error());
    assert!(c.cmd(&["CLIENT", "SETNAME", "bad name"]).is_error());
    let commands = info(&mut c, "commandstats");
    assert!(commands.contains("cmdstat_object|encoding:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0\r\n"), "{commands}");
    let setname = commands.lines().find(|l| l.starts_with("cmdstat_client|setname:")).unwrap_or_else(|| panic!("{commands}"));
    assert!(setname.starts_with("cmdstat_client|setname:calls=1,") && setname.ends_with(",rejected_calls=1,failed_calls=1"), "{setname}");
    assert!(info(&mut c, "errorstats").contains("errorstat_ERR:count=3\r\n"), "every error reply still counts");
}
