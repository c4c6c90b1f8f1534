//! What operators get around the binary: the man pages and shell
//! completions the Debian package ships (dist/man, dist/completions) are
//! what `tlsfront generate` makes from the command line's definition now,
//! render with `man`, name every subcommand, and bash accepts the bash
//! script; `--version` states the build; dist/Containerfile fits this tree
//! (what can be checked without building it).

mod common;

use clap::CommandFactory;
use common::{tool, BIN};
use std::path::Path;
use std::process::Command;

fn dist() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/dist"))
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

const REGENERATE: &str = "the command line changed: regenerate the packaged documents with \
     `cargo run -- generate man dist/man` and, for each of bash (tlsfront), zsh (_tlsfront) \
     and fish (tlsfront.fish), `cargo run -- generate completions SHELL > dist/completions/FILE`";

#[test]
fn the_packaged_man_pages_are_the_generated_ones() {
    let dir = tempfile::tempdir().unwrap();
    run(Command::new(BIN).args(["generate", "man"]).arg(dir.path()));
    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    let made = names(dir.path());
    assert_eq!(made, names(&dist().join("man")), "{REGENERATE}");
    for name in &made {
        assert_eq!(
            std::fs::read(dir.path().join(name)).unwrap(),
            std::fs::read(dist().join("man").join(name)).unwrap(),
            "dist/man/{name}: {REGENERATE}"
        );
    }
}

#[test]
fn the_packaged_completions_are_the_generated_ones() {
    for (shell, file) in [
        ("bash", "tlsfront"),
        ("zsh", "_tlsfront"),
        ("fish", "tlsfront.fish"),
    ] {
        let made = run(Command::new(BIN).args(["generate", "completions", shell]));
        assert!(made.contains("--config"), "{shell}: {made}");
        let kept = std::fs::read_to_string(dist().join("completions").join(file)).unwrap();
        assert!(made == kept, "dist/completions/{file}: {REGENERATE}");
    }
}

#[test]
fn the_man_page_renders_and_names_every_subcommand() {
    let page = dist().join("man/tlsfront.1");
    let text = run(tool("man")
        .arg("-l")
        .arg(&page)
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat"));
    assert!(text.contains("SUBCOMMANDS"), "{text}");
    let cli = tlsfront::cli::Cli::command();
    let mut seen = 0;
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub.get_name();
        assert!(
            text.contains(&format!("tlsfront-{name}(1)")),
            "tlsfront.1 does not name {name}: {text}"
        );
        let own = dist().join(format!("man/tlsfront-{name}.1"));
        let own = run(tool("man")
            .arg("-l")
            .arg(&own)
            .env("MANWIDTH", "100")
            .env("MANPAGER", "cat"));
        assert!(own.contains(&format!("tlsfront-{name}(1)")), "{own}");
        // Nested ones (config check, acme revoke) have their page too.
        for nested in sub.get_subcommands().filter(|s| s.get_name() != "help") {
            let n = nested.get_name();
            assert!(own.contains(&format!("tlsfront-{name}-{n}(1)")), "{own}");
            assert!(dist().join(format!("man/tlsfront-{name}-{n}.1")).is_file());
        }
        seen += 1;
    }
    assert!(seen >= 6, "{seen} subcommands");
    // The hidden packaging command is not documented.
    assert!(!text.contains("generate"), "{text}");
}

#[test]
fn bash_accepts_the_bash_completion() {
    let script = dist().join("completions/tlsfront");
    run(tool("bash").arg("-n").arg(&script));
    // And it completes: the subcommands after `tlsfront `.
    let words = run(tool("bash").arg("-c").arg(format!(
        "source {}; COMP_WORDS=(tlsfront \"\"); COMP_CWORD=1; COMP_LINE='tlsfront '; \
         COMP_POINT=9; _tlsfront tlsfront '' tlsfront; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display()
    )));
    for sub in ["run", "serve", "proxy", "config", "acme", "check"] {
        assert!(words.lines().any(|w| w == sub), "{sub} not in {words}");
    }
}

#[test]
fn version_names_the_build() {
    let line = run(Command::new(BIN).arg("--version"));
    let line = line.trim_end();
    let rest = line
        .strip_prefix(&format!("tlsfront {} (", env!("CARGO_PKG_VERSION")))
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{line:?}"));
    let parts: Vec<&str> = rest.split(", ").collect();
    assert_eq!(parts.last(), Some(&"aws-lc-rs"), "{line}");
    let rustls = parts
        .iter()
        .find_map(|p| p.strip_prefix("rustls "))
        .unwrap_or_else(|| panic!("no rustls version: {line}"));
    assert!(rustls.starts_with("0.23."), "{line}");
    // Built from a git checkout (as here): its commit, as git names it.
    if Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.git")).exists() {
        let head = run(tool("git").args(["-C", env!("CARGO_MANIFEST_DIR")]).args([
            "rev-parse",
            "--short=12",
            "HEAD",
        ]));
        assert_eq!(parts[0], format!("commit {}", head.trim()), "{line}");
    }
    assert_eq!(run(Command::new(BIN).arg("-V")).trim_end(), line);
}

/// dist/Containerfile cannot be built here (no image registry), so what
/// can be checked without building is: it copies every part of the
/// workspace the build reads, its command is one this tlsfront accepts,
/// and it does not run as root.
#[test]
fn the_container_recipe_fits_this_tree() {
    use clap::Parser;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(dist().join("Containerfile")).unwrap();
    let mut copied = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("COPY ")) {
        let words: Vec<&str> = line.split_whitespace().skip(1).collect();
        if words.iter().any(|w| w.starts_with("--from")) {
            continue;
        }
        for src in &words[..words.len() - 1] {
            assert!(root.join(src).exists(), "COPY {src}: not in the tree");
            copied.push(src.to_string());
        }
    }
    // The workspace members and the build script.
    for need in ["Cargo.toml", "Cargo.lock", "build.rs", "src", "crates"] {
        assert!(copied.iter().any(|c| c == need), "{need} is not copied");
    }
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = manifest
        .lines()
        .find_map(|l| l.strip_prefix("members = "))
        .expect("Cargo.toml names the workspace members");
    for m in members.trim_matches(['[', ']']).split(',') {
        let m = m.trim().trim_matches('"');
        assert!(
            m == "." || copied.iter().any(|c| m.starts_with(c.as_str())),
            "workspace member {m} is not copied"
        );
    }
    let json = |key: &str| -> Vec<String> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key}"));
        serde_json::from_str(line.trim()).unwrap()
    };
    assert_eq!(json("ENTRYPOINT "), ["/usr/bin/tlsfront"]);
    let cmd = json("CMD ");
    let args = std::iter::once("tlsfront".to_string()).chain(cmd.iter().cloned());
    if let Err(e) = tlsfront::cli::Cli::try_parse_from(args) {
        panic!("CMD {cmd:?}: {e}");
    }
    assert!(cmd.iter().any(|a| a.ends_with(":8443")), "{cmd:?}");
    assert!(text.contains("EXPOSE 8443"));
    let user = text
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    assert!(!["root", "0"].contains(&user.trim()), "runs as {user}");
}
