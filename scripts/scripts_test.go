package scripts_test

// These tests run the shell scripts that install what the tests need
// (scripts/apt-install.sh, scripts/with-promtool.sh,
// scripts/with-postgres.sh) as an unprivileged user, on a PATH where the
// tool is missing and apt-get and sudo are stand-ins that record how they
// were called: a user who is not root gets the package installed through
// sudo, or, without sudo, an error naming the command to run as root.

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

// stubs is a PATH for the scripts: a folder of stand-ins first, then a
// folder of links to this system's programs without the ones left out.
type stubs struct {
	dir  string // the stand-ins, and the logs they write
	path string
}

// newStubs makes the stand-ins: apt-get, which records its arguments in
// apt-get.log and, on `install`, puts a program named by the file
// provides.PKG (if any) into the stand-ins' folder; sudo (unless noSudo),
// which records its arguments in sudo.log, runs apt-get and env commands
// and only records the others (it cannot make anyone root). The system's
// programs named in without, and apt-get and sudo, are left off the PATH.
func newStubs(t *testing.T, noSudo bool, without ...string) *stubs {
	t.Helper()
	dir := worldDir(t)
	farm := worldDir(t)
	skip := map[string]bool{"apt-get": true, "sudo": true}
	for _, w := range without {
		skip[w] = true
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if skip[e.Name()] || e.IsDir() {
				continue
			}
			link := filepath.Join(farm, e.Name())
			if _, err := os.Lstat(link); err == nil {
				continue // an earlier folder of the PATH wins
			}
			if err := os.Symlink(filepath.Join(d, e.Name()), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	writeExec(t, filepath.Join(dir, "apt-get"), `#!/bin/sh
printf '%s\n' "$*" >>"`+dir+`/apt-get.log"
if [ "$1" = install ]; then
	for pkg; do
		if [ -f "`+dir+`/provides.$pkg" ]; then
			prog="$(cat "`+dir+`/provides.$pkg")"
			printf '#!/bin/sh\necho "stand-in %s"\n' "$prog" >"`+dir+`/$prog"
			chmod 755 "`+dir+`/$prog"
		fi
	done
fi
`)
	if !noSudo {
		writeExec(t, filepath.Join(dir, "sudo"), `#!/bin/sh
printf '%s\n' "$*" >>"`+dir+`/sudo.log"
case "$1" in
apt-get | env) exec "$@" ;;
tee) cat >/dev/null ;;
esac
`)
	}
	return &stubs{dir: dir, path: dir + string(os.PathListSeparator) + farm}
}

// provides makes apt-get's stand-in install a program prog with package pkg.
func (s *stubs) provides(t *testing.T, pkg, prog string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(s.dir, "provides."+pkg), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
}

// log returns what the stand-in name recorded ("" when it never ran).
func (s *stubs) log(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dir, name+".log"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// worldDir makes a folder that the unprivileged user can read and write.
func worldDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sqsonce-scripts-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeExec(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
}

// unprivileged returns the command prefix that runs a program as a user
// who is not root: nothing when the test is not root, setpriv to nobody
// when it is.
func unprivileged(t *testing.T) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("running as root without setpriv (util-linux): cannot run the scripts as another user")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("running as root without a user nobody: %v", err)
	}
	return []string{setpriv, "--reuid=" + u.Uid, "--regid=" + u.Gid, "--clear-groups", "--"}
}

// run runs argv (after prefix) with PATH set to s's and returns its exit
// status and standard error.
func (s *stubs) run(t *testing.T, prefix []string, argv ...string) (int, string) {
	t.Helper()
	all := append(append([]string(nil), prefix...), argv...)
	cmd := exec.Command(all[0], all[1:]...)
	cmd.Env = []string{"PATH=" + s.path, "HOME=" + s.dir, "TMPDIR=" + s.dir, "LANG=C"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stderr.String()
	default:
		t.Fatalf("%s: %v", strings.Join(all, " "), err)
		return 0, ""
	}
}

func script(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const aptInstall = "env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "

func TestAptInstall(t *testing.T) {
	t.Parallel()
	nonRoot := unprivileged(t)

	t.Run("WithSudo", func(t *testing.T) {
		t.Parallel()
		s := newStubs(t, false, "chromium")
		s.provides(t, "chromium", "chromium")
		status, stderr := s.run(t, nonRoot, script(t, "apt-install.sh"), "chromium", "chromium")
		if status != 0 {
			t.Fatalf("exit status %d, want 0; stderr:\n%s", status, stderr)
		}
		if got := s.log(t, "sudo"); !strings.Contains(got, aptInstall+"chromium") {
			t.Errorf("sudo ran %q, want a line %q", got, aptInstall+"chromium")
		}
		if !strings.Contains(stderr, "with sudo") {
			t.Errorf("stderr does not say it uses sudo:\n%s", stderr)
		}
	})

	t.Run("Present", func(t *testing.T) {
		t.Parallel()
		s := newStubs(t, false)
		writeExec(t, filepath.Join(s.dir, "chromium"), "#!/bin/sh\n")
		if status, stderr := s.run(t, nonRoot, script(t, "apt-install.sh"), "chromium", "chromium"); status != 0 {
			t.Fatalf("exit status %d, want 0; stderr:\n%s", status, stderr)
		}
		if got := s.log(t, "apt-get") + s.log(t, "sudo"); got != "" {
			t.Errorf("chromium is there, yet these ran:\n%s", got)
		}
	})

	t.Run("WithoutSudo", func(t *testing.T) {
		t.Parallel()
		s := newStubs(t, true, "chromium")
		status, stderr := s.run(t, nonRoot, script(t, "apt-install.sh"), "chromium", "chromium")
		if status != 1 {
			t.Fatalf("exit status %d, want 1; stderr:\n%s", status, stderr)
		}
		if want := "run `apt-get install --no-install-recommends chromium` as root"; !strings.Contains(stderr, want) {
			t.Errorf("stderr = %q, want it to contain %q", stderr, want)
		}
		if got := s.log(t, "apt-get"); got != "" {
			t.Errorf("apt-get ran without root: %q", got)
		}
	})

	t.Run("AsRoot", func(t *testing.T) {
		t.Parallel()
		if os.Geteuid() != 0 {
			t.Skip("not root")
		}
		s := newStubs(t, true, "chromium")
		s.provides(t, "chromium", "chromium")
		if status, stderr := s.run(t, nil, script(t, "apt-install.sh"), "chromium", "chromium"); status != 0 {
			t.Fatalf("exit status %d, want 0; stderr:\n%s", status, stderr)
		}
		if got := s.log(t, "apt-get"); !strings.Contains(got, "install -y -q --no-install-recommends chromium") {
			t.Errorf("apt-get ran %q, want an install of chromium", got)
		}
	})
}

func TestWithPromtool_NotRoot(t *testing.T) {
	t.Parallel()
	nonRoot := unprivileged(t)

	t.Run("WithSudo", func(t *testing.T) {
		t.Parallel()
		s := newStubs(t, false, "promtool")
		s.provides(t, "prometheus", "promtool")
		status, stderr := s.run(t, nonRoot, script(t, "with-promtool.sh"), "promtool")
		if status != 0 {
			t.Fatalf("exit status %d, want 0; stderr:\n%s", status, stderr)
		}
		if got := s.log(t, "sudo"); !strings.Contains(got, aptInstall+"prometheus") {
			t.Errorf("sudo ran %q, want a line %q", got, aptInstall+"prometheus")
		}
	})

	t.Run("WithoutSudo", func(t *testing.T) {
		t.Parallel()
		s := newStubs(t, true, "promtool")
		status, stderr := s.run(t, nonRoot, script(t, "with-promtool.sh"), "promtool")
		if status != 1 {
			t.Fatalf("exit status %d, want 1; stderr:\n%s", status, stderr)
		}
		if want := "run `apt-get install --no-install-recommends prometheus` as root"; !strings.Contains(stderr, want) {
			t.Errorf("stderr = %q, want it to contain %q", stderr, want)
		}
	})
}

// TestWithPostgres_NotRoot hides the server binaries under
// /usr/lib/postgresql in a mount namespace of its own (so it needs root
// and unshare; the cluster the script would start is not the point): the
// stand-in apt-get installs nothing, so the script ends with "no server",
// after it asked sudo for the install.
func TestWithPostgres_NotRoot(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to hide the server binaries in a mount namespace")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	nonRoot := unprivileged(t)
	empty := worldDir(t)
	var hide []string
	if _, err := os.Stat("/usr/lib/postgresql"); err == nil {
		hide = []string{unshare, "-m", "sh", "-c", `mount --bind "$0" /usr/lib/postgresql && exec "$@"`, empty}
		if out, err := exec.Command(unshare, "-m", "true").CombinedOutput(); err != nil {
			t.Skipf("cannot make a mount namespace: %v: %s", err, out)
		}
	}
	prefix := append(hide, nonRoot...)

	t.Run("WithSudo", func(t *testing.T) {
		t.Parallel()
		s := newStubs(t, false)
		status, stderr := s.run(t, prefix, script(t, "with-postgres.sh"), "true")
		if status != 1 || !strings.Contains(stderr, "postgresql installed, but no server") {
			t.Fatalf("exit status %d, want 1 after an install that put no server; stderr:\n%s", status, stderr)
		}
		got := s.log(t, "sudo")
		for _, want := range []string{
			"mkdir -p /etc/postgresql-common/createcluster.d",
			"tee /etc/postgresql-common/createcluster.d/sqsonce-tests.conf",
			aptInstall + "postgresql",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("sudo ran %q, want a line %q", got, want)
			}
		}
	})

	t.Run("WithoutSudo", func(t *testing.T) {
		t.Parallel()
		s := newStubs(t, true)
		status, stderr := s.run(t, prefix, script(t, "with-postgres.sh"), "true")
		if status != 1 {
			t.Fatalf("exit status %d, want 1; stderr:\n%s", status, stderr)
		}
		if want := "run `apt-get install --no-install-recommends postgresql` as root"; !strings.Contains(stderr, want) {
			t.Errorf("stderr = %q, want it to contain %q", stderr, want)
		}
	})
}
