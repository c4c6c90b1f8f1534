# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_tlsfront_global_optspecs
    string join \n h/help V/version
end

function __fish_tlsfront_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_tlsfront_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_tlsfront_using_subcommand
    set -l cmd (__fish_tlsfront_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c tlsfront -n "__fish_tlsfront_needs_command" -s h -l help -d 'Print help'
complete -c tlsfront -n "__fish_tlsfront_needs_command" -s V -l version -d 'Print version'
complete -c tlsfront -n "__fish_tlsfront_needs_command" -f -a "run" -d 'Run the sites a config file describes (static files and backends on the same listeners, chosen by the name the client asks for)'
complete -c tlsfront -n "__fish_tlsfront_needs_command" -f -a "serve" -d 'Serve a directory over HTTPS (HTTP/1.1): one site, from flags'
complete -c tlsfront -n "__fish_tlsfront_needs_command" -f -a "proxy" -d 'Terminate TLS for a plain-TCP backend (like hitch or stud): one site, from flags'
complete -c tlsfront -n "__fish_tlsfront_needs_command" -f -a "config" -d 'Check a config file (nginx -t, hitch --test)'
complete -c tlsfront -n "__fish_tlsfront_needs_command" -f -a "acme" -d 'ACME certificates of the sites with `acme = true`'
complete -c tlsfront -n "__fish_tlsfront_needs_command" -f -a "check" -d 'Show what this kernel\'s TLS offload can do, and how to fix each "no"'
complete -c tlsfront -n "__fish_tlsfront_needs_command" -f -a "generate" -d 'The man pages and shell completions, made from this command line\'s own definition (for packagers: dist/man and dist/completions are its output)'
complete -c tlsfront -n "__fish_tlsfront_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand run" -l config -d 'The config file: listeners and [[site]] tables (see docs/CONFIG.md)' -r -F
complete -c tlsfront -n "__fish_tlsfront_using_subcommand run" -l listen -d 'Address to listen on, IPv4 or IPv6 (repeatable) [default: the config file\'s listen, else 127.0.0.1:8443]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand run" -l http-listen -d 'Plain-HTTP address (repeatable) that redirects to HTTPS and answers ACME HTTP-01, e.g. 0.0.0.0:80 [default: the config file\'s http_listen, else none]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand run" -l admin -d 'Plain-HTTP admin address for /metrics (Prometheus) and /healthz, e.g. 127.0.0.1:9101 [default: none]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand run" -l workers -d 'Worker threads [default: number of cores]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand run" -l ktls -d 'Kernel TLS: auto (use where possible), off, or require [default: auto]' -r -f -a "auto\t'Use kTLS where the kernel takes the negotiated cipher; user-space TLS otherwise'
off\t'Never use kTLS'
require\t'Refuse to start unless the kernel offloads every cipher tlsfront negotiates'"
complete -c tlsfront -n "__fish_tlsfront_using_subcommand run" -l user -d 'Once the keys are read and the ports bound, run as this user (needs tlsfront started as root)' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand run" -l group -d '... and this group [default: the user\'s own]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand run" -l proxy-from -d 'Trusted sources of PROXY headers (CIDR, repeatable) [default: 127.0.0.0/8 and ::1/128]. Other sources are refused' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand run" -l handshake-timeout -d 'Seconds allowed for the TLS handshake [default: 10]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand run" -l ticket-keys -d 'Session ticket key file, nginx\'s format (80 or 48 random bytes: `openssl rand 80 > FILE`); repeatable: the first encrypts, all decrypt [default: random keys rotated in memory]' -r -F
complete -c tlsfront -n "__fish_tlsfront_using_subcommand run" -l access-log -d 'Access log: a file (appended to; SIGUSR1 reopens it), "stdout" or "off" [default: off]. In a config file, every site\'s default' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand run" -l access-log-format -d 'Access log lines: combined (nginx\'s), tls (combined and the TLS fields) or json [default: combined]' -r -f -a "combined\t'nginx\'s `combined`'
tls\t'`combined`, then protocol, cipher, SNI, resumption, data path and request time'
json\t'One JSON object per line, every field named'"
complete -c tlsfront -n "__fish_tlsfront_using_subcommand run" -l accept-proxy -d 'Expect a PROXY v1/v2 header from a load balancer in front, and pass its client address on. Only from --proxy-from sources'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l listen -d 'Address to listen on, IPv4 or IPv6 (repeatable) [default: the config file\'s listen, else 127.0.0.1:8443]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l http-listen -d 'Plain-HTTP address (repeatable) that redirects to HTTPS and answers ACME HTTP-01, e.g. 0.0.0.0:80 [default: the config file\'s http_listen, else none]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l admin -d 'Plain-HTTP admin address for /metrics (Prometheus) and /healthz, e.g. 127.0.0.1:9101 [default: none]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l workers -d 'Worker threads [default: number of cores]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l ktls -d 'Kernel TLS: auto (use where possible), off, or require [default: auto]' -r -f -a "auto\t'Use kTLS where the kernel takes the negotiated cipher; user-space TLS otherwise'
off\t'Never use kTLS'
require\t'Refuse to start unless the kernel offloads every cipher tlsfront negotiates'"
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l user -d 'Once the keys are read and the ports bound, run as this user (needs tlsfront started as root)' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l group -d '... and this group [default: the user\'s own]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l proxy-from -d 'Trusted sources of PROXY headers (CIDR, repeatable) [default: 127.0.0.0/8 and ::1/128]. Other sources are refused' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l handshake-timeout -d 'Seconds allowed for the TLS handshake [default: 10]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l ticket-keys -d 'Session ticket key file, nginx\'s format (80 or 48 random bytes: `openssl rand 80 > FILE`); repeatable: the first encrypts, all decrypt [default: random keys rotated in memory]' -r -F
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l access-log -d 'Access log: a file (appended to; SIGUSR1 reopens it), "stdout" or "off" [default: off]. In a config file, every site\'s default' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l access-log-format -d 'Access log lines: combined (nginx\'s), tls (combined and the TLS fields) or json [default: combined]' -r -f -a "combined\t'nginx\'s `combined`'
tls\t'`combined`, then protocol, cipher, SNI, resumption, data path and request time'
json\t'One JSON object per line, every field named'"
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l cert -d 'Certificate chain, PEM (server certificate first). Default: a self-signed certificate made on first run' -r -F
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l key -d 'Private key for --cert, PEM (PKCS#8, RSA or EC)' -r -F
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l precompressed -d 'Serve precompressed siblings (app.js.br, .zst, .gz) of these codings to clients that accept them, preferred first: br,zstd,gzip' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l fallback -d 'Answer paths that do not exist with this file (e.g. /index.html)' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l charset -d 'Add "; charset=CHARSET" to the Content-Type of text files' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l open-file-cache -d 'Files each worker keeps open for its next requests; 0 keeps none [default: 1000, fewer if the open-file limit is low]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l open-file-cache-valid -d 'Seconds a kept file\'s path is trusted before it is looked up again (each request still checks the file\'s size and time) [default: 1]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l config -d 'TOML file with these settings plus [limits] and [timeouts] (one site; for several, use `tlsfront run --config`)' -r -F
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l request-header-timeout -d 'Seconds allowed to receive a request head [default: 60]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l keepalive-timeout -d 'Seconds an idle keep-alive connection is kept [default: 75]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l send-timeout -d 'Seconds the client may accept no data while we send [default: 60]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l accept-proxy -d 'Expect a PROXY v1/v2 header from a load balancer in front, and pass its client address on. Only from --proxy-from sources'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l autoindex -d 'List directories that have no index.html'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -l follow-symlinks-outside -d 'Serve files reached through symlinks that lead outside DIR'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand serve" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l listen -d 'Address to listen on, IPv4 or IPv6 (repeatable) [default: the config file\'s listen, else 127.0.0.1:8443]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l http-listen -d 'Plain-HTTP address (repeatable) that redirects to HTTPS and answers ACME HTTP-01, e.g. 0.0.0.0:80 [default: the config file\'s http_listen, else none]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l admin -d 'Plain-HTTP admin address for /metrics (Prometheus) and /healthz, e.g. 127.0.0.1:9101 [default: none]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l workers -d 'Worker threads [default: number of cores]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l ktls -d 'Kernel TLS: auto (use where possible), off, or require [default: auto]' -r -f -a "auto\t'Use kTLS where the kernel takes the negotiated cipher; user-space TLS otherwise'
off\t'Never use kTLS'
require\t'Refuse to start unless the kernel offloads every cipher tlsfront negotiates'"
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l user -d 'Once the keys are read and the ports bound, run as this user (needs tlsfront started as root)' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l group -d '... and this group [default: the user\'s own]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l proxy-from -d 'Trusted sources of PROXY headers (CIDR, repeatable) [default: 127.0.0.0/8 and ::1/128]. Other sources are refused' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l handshake-timeout -d 'Seconds allowed for the TLS handshake [default: 10]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l ticket-keys -d 'Session ticket key file, nginx\'s format (80 or 48 random bytes: `openssl rand 80 > FILE`); repeatable: the first encrypts, all decrypt [default: random keys rotated in memory]' -r -F
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l access-log -d 'Access log: a file (appended to; SIGUSR1 reopens it), "stdout" or "off" [default: off]. In a config file, every site\'s default' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l access-log-format -d 'Access log lines: combined (nginx\'s), tls (combined and the TLS fields) or json [default: combined]' -r -f -a "combined\t'nginx\'s `combined`'
tls\t'`combined`, then protocol, cipher, SNI, resumption, data path and request time'
json\t'One JSON object per line, every field named'"
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l cert -d 'Certificate chain, PEM (server certificate first). Default: a self-signed certificate made on first run' -r -F
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l key -d 'Private key for --cert, PEM (PKCS#8, RSA or EC)' -r -F
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l backend -d 'The plain-TCP service: HOST:PORT, or a Unix socket path' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l write-proxy -d 'Send a PROXY protocol header (v1 text, or v2 binary with ALPN, SNI and SSL TLVs) to the backend first' -r -f -a "v1\t''
v2\t''"
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l alpn -d 'ALPN protocols to offer, comma-separated (e.g. h2,http/1.1) [default: none]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l config -d 'TOML file with these settings plus [limits] and [timeouts] (one site; for several, use `tlsfront run --config`)' -r -F
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l connect-timeout -d 'Seconds allowed to connect to the backend [default: 5]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l idle-timeout -d 'Seconds without a byte in either direction before closing [default: 300]' -r
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -l accept-proxy -d 'Expect a PROXY v1/v2 header from a load balancer in front, and pass its client address on. Only from --proxy-from sources'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand proxy" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand config; and not __fish_seen_subcommand_from check help" -s h -l help -d 'Print help'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand config; and not __fish_seen_subcommand_from check help" -f -a "check" -d 'Parse FILE, load every certificate and key, check that keys match and names are covered, warn about certificates near expiry, and print the resolved sites. Exits 0 if tlsfront would start with it'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand config; and not __fish_seen_subcommand_from check help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand config; and __fish_seen_subcommand_from check" -s h -l help -d 'Print help'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand config; and __fish_seen_subcommand_from help" -f -a "check" -d 'Parse FILE, load every certificate and key, check that keys match and names are covered, warn about certificates near expiry, and print the resolved sites. Exits 0 if tlsfront would start with it'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand config; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand acme; and not __fish_seen_subcommand_from revoke help" -s h -l help -d 'Print help'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand acme; and not __fish_seen_subcommand_from revoke help" -f -a "revoke" -d 'Revoke the stored certificate of the site with NAME (a key that may have leaked) and remove it: at the next reload (SIGHUP, `systemctl reload tlsfront`) the site serves a placeholder and gets a new one'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand acme; and not __fish_seen_subcommand_from revoke help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand acme; and __fish_seen_subcommand_from revoke" -l config -d 'The config file the server runs with' -r -F
complete -c tlsfront -n "__fish_tlsfront_using_subcommand acme; and __fish_seen_subcommand_from revoke" -s h -l help -d 'Print help'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand acme; and __fish_seen_subcommand_from help" -f -a "revoke" -d 'Revoke the stored certificate of the site with NAME (a key that may have leaked) and remove it: at the next reload (SIGHUP, `systemctl reload tlsfront`) the site serves a placeholder and gets a new one'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand acme; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand check" -s h -l help -d 'Print help'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand generate; and not __fish_seen_subcommand_from man completions help" -s h -l help -d 'Print help'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand generate; and not __fish_seen_subcommand_from man completions help" -f -a "man" -d 'Write tlsfront.1 and a page per subcommand (tlsfront-run.1, ...) into DIR'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand generate; and not __fish_seen_subcommand_from man completions help" -f -a "completions" -d 'Print the completion script for SHELL'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand generate; and not __fish_seen_subcommand_from man completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand generate; and __fish_seen_subcommand_from man" -s h -l help -d 'Print help'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand generate; and __fish_seen_subcommand_from completions" -s h -l help -d 'Print help'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand generate; and __fish_seen_subcommand_from help" -f -a "man" -d 'Write tlsfront.1 and a page per subcommand (tlsfront-run.1, ...) into DIR'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand generate; and __fish_seen_subcommand_from help" -f -a "completions" -d 'Print the completion script for SHELL'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand generate; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand help; and not __fish_seen_subcommand_from run serve proxy config acme check generate help" -f -a "run" -d 'Run the sites a config file describes (static files and backends on the same listeners, chosen by the name the client asks for)'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand help; and not __fish_seen_subcommand_from run serve proxy config acme check generate help" -f -a "serve" -d 'Serve a directory over HTTPS (HTTP/1.1): one site, from flags'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand help; and not __fish_seen_subcommand_from run serve proxy config acme check generate help" -f -a "proxy" -d 'Terminate TLS for a plain-TCP backend (like hitch or stud): one site, from flags'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand help; and not __fish_seen_subcommand_from run serve proxy config acme check generate help" -f -a "config" -d 'Check a config file (nginx -t, hitch --test)'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand help; and not __fish_seen_subcommand_from run serve proxy config acme check generate help" -f -a "acme" -d 'ACME certificates of the sites with `acme = true`'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand help; and not __fish_seen_subcommand_from run serve proxy config acme check generate help" -f -a "check" -d 'Show what this kernel\'s TLS offload can do, and how to fix each "no"'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand help; and not __fish_seen_subcommand_from run serve proxy config acme check generate help" -f -a "generate" -d 'The man pages and shell completions, made from this command line\'s own definition (for packagers: dist/man and dist/completions are its output)'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand help; and not __fish_seen_subcommand_from run serve proxy config acme check generate help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand help; and __fish_seen_subcommand_from config" -f -a "check" -d 'Parse FILE, load every certificate and key, check that keys match and names are covered, warn about certificates near expiry, and print the resolved sites. Exits 0 if tlsfront would start with it'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand help; and __fish_seen_subcommand_from acme" -f -a "revoke" -d 'Revoke the stored certificate of the site with NAME (a key that may have leaked) and remove it: at the next reload (SIGHUP, `systemctl reload tlsfront`) the site serves a placeholder and gets a new one'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand help; and __fish_seen_subcommand_from generate" -f -a "man" -d 'Write tlsfront.1 and a page per subcommand (tlsfront-run.1, ...) into DIR'
complete -c tlsfront -n "__fish_tlsfront_using_subcommand help; and __fish_seen_subcommand_from generate" -f -a "completions" -d 'Print the completion script for SHELL'
