//! Running as an unprivileged user (nginx's `user`, HAProxy's `user`/`group`):
//! the names are looked up when the settings are read, so that a wrong one is
//! refused at once, naming where it was set; the server process of
//! tlsfront's privileged parent ([`crate::parent`]) takes that identity for
//! good before it reads a file.

use nix::unistd::{Gid, Group, Uid, User};
use std::ffi::CString;

/// The identity to run as, resolved from names.
#[derive(Clone, Debug)]
pub struct RunAs {
    user: String,
    /// The group as named, if it was (else the user's own).
    group: Option<String>,
    uid: Uid,
    gid: Gid,
    /// Where it was set (a flag, or the config file and setting).
    origin: String,
}

#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("{origin}: there is no user named {name:?} on this system (create one, e.g. 'useradd --system --no-create-home {name}', or name another)")]
    NoUser { origin: String, name: String },
    #[error("{origin}: there is no group named {name:?} on this system (create it with 'groupadd --system {name}', or name another)")]
    NoGroup { origin: String, name: String },
    #[error("{origin}: cannot look up {name:?}: {source}")]
    Lookup {
        origin: String,
        name: String,
        source: nix::Error,
    },
    #[error("{origin}: switching to user {user:?} needs tlsfront started as root, but it runs as uid {uid}; leave the setting out to keep running as uid {uid}, or start it as root")]
    NotRoot {
        origin: String,
        user: String,
        uid: Uid,
    },
    #[error("{origin}: running as root drops no privilege: name an unprivileged user (e.g. www-data), or leave the setting out")]
    Root { origin: String },
    #[error("{origin}: cannot switch to user {user:?}: {step} failed: {source}")]
    Switch {
        origin: String,
        user: String,
        step: &'static str,
        source: nix::Error,
    },
}

/// The same identity (wherever it was set).
impl PartialEq for RunAs {
    fn eq(&self, other: &RunAs) -> bool {
        (self.uid, self.gid) == (other.uid, other.gid)
    }
}

impl RunAs {
    /// Look up `user` (and `group`, else the user's own group).
    /// `origin(key)` names where `key` was set. Refused at once unless this
    /// process runs as root, which alone can switch, or has switched to
    /// that user already (a reload after the switch reads the same
    /// settings).
    pub fn resolve(
        user: &str,
        group: Option<&str>,
        origin: impl Fn(&str) -> String,
    ) -> Result<RunAs, PrivilegeError> {
        let now = Uid::current();
        let not_root = || PrivilegeError::NotRoot {
            origin: origin("user"),
            user: user.into(),
            uid: now,
        };
        // Already that user: switched earlier in this process (a reload),
        // or started as it by tlsfront's privileged parent.
        let switched_to_it = User::from_uid(now)
            .ok()
            .flatten()
            .map(|u| u.name)
            .as_deref()
            == Some(user);
        if !now.is_root() && !switched_to_it {
            return Err(not_root());
        }
        let found = User::from_name(user)
            .map_err(|source| PrivilegeError::Lookup {
                origin: origin("user"),
                name: user.into(),
                source,
            })?
            .ok_or_else(|| PrivilegeError::NoUser {
                origin: origin("user"),
                name: user.into(),
            })?;
        if found.uid.is_root() {
            return Err(PrivilegeError::Root {
                origin: origin("user"),
            });
        }
        let gid = match group {
            None => found.gid,
            Some(g) => {
                Group::from_name(g)
                    .map_err(|source| PrivilegeError::Lookup {
                        origin: origin("group"),
                        name: g.into(),
                        source,
                    })?
                    .ok_or_else(|| PrivilegeError::NoGroup {
                        origin: origin("group"),
                        name: g.into(),
                    })?
                    .gid
            }
        };
        Ok(RunAs {
            user: user.into(),
            group: group.map(str::to_string),
            uid: found.uid,
            gid,
            origin: origin("user"),
        })
    }

    /// Become this user for good: its groups, its group, its uid (in that
    /// order: a process that has left root cannot change its groups). From
    /// root to another uid the kernel clears every capability, and glibc
    /// applies each change to every thread of the process.
    pub fn switch(&self) -> Result<(), PrivilegeError> {
        let now = Uid::current();
        if now == self.uid && Uid::effective() == self.uid && !now.is_root() {
            // Started as this user by tlsfront's privileged parent.
            return Ok(());
        }
        if !now.is_root() {
            return Err(PrivilegeError::NotRoot {
                origin: self.origin.clone(),
                user: self.user.clone(),
                uid: now,
            });
        }
        let step = |step: &'static str| {
            move |source| PrivilegeError::Switch {
                origin: self.origin.clone(),
                user: self.user.clone(),
                step,
                source,
            }
        };
        let name =
            CString::new(self.user.as_str()).map_err(|_| step("initgroups")(nix::Error::EINVAL))?;
        nix::unistd::initgroups(&name, self.gid).map_err(step("initgroups"))?;
        nix::unistd::setgid(self.gid).map_err(step("setgid"))?;
        nix::unistd::setuid(self.uid).map_err(step("setuid"))?;
        // There is no way back: a uid of 0 now would mean the switch did
        // not take.
        if nix::unistd::setuid(Uid::from_raw(0)).is_ok() {
            return Err(step("dropping root")(nix::Error::EPERM));
        }
        Ok(())
    }

    /// (uid, gid): who what the parent makes for the server process to
    /// write (the ACME state directory) belongs to.
    pub fn ids(&self) -> (u32, u32) {
        (self.uid.as_raw(), self.gid.as_raw())
    }

    /// The user's name.
    pub fn name(&self) -> &str {
        &self.user
    }

    /// `USER[,GROUP]`, as the parent names them to its server process
    /// ([`crate::privsep::LINK_VAR`]), which looks them up again.
    pub fn link_names(&self) -> String {
        match &self.group {
            Some(g) => format!("{},{g}", self.user),
            None => self.user.clone(),
        }
    }

    /// For the start-up line.
    pub fn describe(&self) -> String {
        format!(
            "running as user {} (uid {}, gid {})",
            self.user, self.uid, self.gid
        )
    }
}
