#!/usr/bin/python3
"""Checks deploy/seccomp/browserd-chrome.json the way a container runtime applies it.

The profile is loaded into a libseccomp filter (Debian's python3-seccomp, the library runc and
containerd use), and Chrome is started under it as an unprivileged user with its sandbox on: it
must render a page. Then the same filter refusing user namespaces (as a runtime's default profile does) must make
Chrome fail
(so the check does exercise the user namespaces the sandbox needs), and `mount` must be refused.

Usage: scripts/check_seccomp.py [CHROME...]   (default: browserd's default Chrome, Debian's
/usr/bin/chromium-headless-shell, and the full build /usr/bin/chromium, each that is installed;
needs root or the user running it to be unprivileged already).
"""

import json
import os
import pwd
import subprocess
import sys
import tempfile

import seccomp  # Debian: python3-seccomp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILE = os.path.join(ROOT, "deploy", "seccomp", "browserd-chrome.json")
OPS = {"SCMP_CMP_EQ": seccomp.EQ, "SCMP_CMP_NE": seccomp.NE, "SCMP_CMP_MASKED_EQ": seccomp.MASKED_EQ}


CLONE_NEWUSER = 0x10000000
ENOSYS = 38


def build_filter(profile, without_user_namespaces=False):
    """The profile as a filter; `without_user_namespaces` also refuses clone with
    CLONE_NEWUSER and unshare, and makes clone3 unknown (glibc then uses clone for threads), as
    a runtime's default profile does."""
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO", "deny by default"
    flt = seccomp.SyscallFilter(defaction=seccomp.ERRNO(profile.get("defaultErrnoRet", 1)))
    without = {"clone", "clone3", "unshare"} if without_user_namespaces else set()
    if without_user_namespaces:
        flt.add_rule(seccomp.ALLOW, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_NEWUSER, 0))
        flt.add_rule(seccomp.ERRNO(ENOSYS), "clone3")
    for rule in profile["syscalls"]:
        assert rule["action"] == "SCMP_ACT_ALLOW", rule
        args = [seccomp.Arg(a["index"], OPS[a["op"]], a["value"]) for a in rule.get("args", [])]
        for name in rule["names"]:
            if name in without:
                continue
            try:
                seccomp.resolve_syscall(seccomp.Arch.NATIVE, name)
            except (ValueError, RuntimeError):
                continue  # not a syscall of this architecture (runtimes skip them too)
            flt.add_rule(seccomp.ALLOW, name, *args)
    return flt


def run_confined(flt, argv, user, home):
    """Runs argv under the filter, as `user` when given (we are root), with a minimal
    environment; returns (exit code, output)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            os.dup2(write_end, 1)
            os.dup2(write_end, 2)
            if user is not None:
                os.setgroups([])
                os.setgid(user.pw_gid)
                os.setuid(user.pw_uid)
            flt.load()
            os.execve(argv[0], argv, {"PATH": "/usr/bin:/bin", "HOME": home, "LANG": "C"})
        finally:
            os._exit(127)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as out:
        output = out.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output


def chrome_renders(flt, chrome, user):
    """Whether Chrome, sandboxed, renders a page under the filter; with its exit code and output."""
    with tempfile.TemporaryDirectory(prefix="browserd-seccomp-") as home:
        if user is not None:
            os.chown(home, user.pw_uid, user.pw_gid)
        # The full build runs headless with --headless=new; the shell is headless only (and
        # takes no flag), told apart by name as browserd does (crates/browser/src/launch.rs).
        name = os.path.basename(os.path.realpath(chrome)) + " " + os.path.basename(chrome)
        shell = "headless-shell" in name or "headless_shell" in name
        argv = [
            chrome, *([] if shell else ["--headless=new"]), "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-dev-shm-usage",
            f"--user-data-dir={home}/profile", "--dump-dom",
            "data:text/html,<p>rendered-under-the-profile</p>",
        ]
        status, output = run_confined(flt, argv, user, home)
        return "rendered-under-the-profile" in output, status, output


DEFAULT_CHROMES = ["/usr/bin/chromium-headless-shell", "/usr/bin/chromium"]


def main():
    chromes = sys.argv[1:] or [c for c in DEFAULT_CHROMES if os.path.exists(c)]
    assert chromes, f"none of {DEFAULT_CHROMES} is installed"
    with open(PROFILE) as f:
        profile = json.load(f)
    user = None
    if os.geteuid() == 0:
        for name in ("browserd-chrome", "nobody"):
            try:
                user = pwd.getpwnam(name)
                break
            except KeyError:
                pass
        assert user is not None, "no unprivileged user to run Chrome as"
    failures = []

    for chrome in chromes:
        ok, status, output = chrome_renders(build_filter(profile), chrome, user)
        if not ok:
            failures.append(f"{chrome} did not render under the profile (exit {status}):\n"
                            f"{output[-2000:]}")

        no_namespaces = build_filter(profile, without_user_namespaces=True)
        ok, _, _ = chrome_renders(no_namespaces, chrome, user)
        if ok:
            failures.append(f"{chrome} rendered without namespaces: the check does not exercise "
                            "the sandbox")

    status, _ = run_confined(build_filter(profile), ["/bin/sh", "-c", "mount -t tmpfs none /mnt"], None, "/tmp")
    if status == 0:
        failures.append("mount is allowed by the profile")

    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    if failures:
        sys.exit(1)
    print(f"seccomp profile: Chrome renders sandboxed under it ({', '.join(chromes)}), not "
          "without user namespaces; mount refused")


if __name__ == "__main__":
    main()
