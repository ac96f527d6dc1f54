package testkit

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartPgBouncer starts a PgBouncer (Debian's pgbouncer) in transaction
// pooling mode in front of the server of dbURL, stopped when t ends, and
// returns dbURL pointed at it. It has no prepared-statement support (1.18
// has none; later versions only with max_prepared_statements, left at 0
// here), so a client must not prepare: the test sets pgx's
// default_query_exec_mode. A missing pgbouncer skips the test, or fails it
// under CI=true (make test installs it).
func StartPgBouncer(t testing.TB, dbURL string) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer"
		if _, statErr := os.Stat(bin); statErr != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("pgbouncer is not installed, and CI=true: install it (apt-get install pgbouncer); make test does")
			}
			t.Skip("pgbouncer is not installed (apt-get install pgbouncer); skipped outside CI")
		}
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgbouncer: parse %q: %v", dbURL, err)
	}
	upstreamHost, upstreamPort := u.Hostname(), u.Port()
	if upstreamPort == "" {
		upstreamPort = "5432"
	}
	port := freePort(t)
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 200
default_pool_size = 20
server_reset_query =
logfile = %s
`, upstreamHost, upstreamPort, port, filepath.Join(dir, "users.txt"), filepath.Join(dir, "pgbouncer.log"))
	userName := u.User.Username()
	files := map[string]string{"pgbouncer.ini": ini, "users.txt": fmt.Sprintf("%q \"\"\n", userName)}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	// PgBouncer refuses to run as root; as root it can drop to another
	// user (-u), which must be able to read its files and write its log.
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgbouncer: running as root, and no postgres user to run it as: %v", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		for _, p := range []string{dir, filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "users.txt")} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		args = append([]string{"-u", "postgres"}, args...)
	}
	cmd := exec.Command(bin, args...)
	out := &SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("pgbouncer: start: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	bouncerURL := u.String()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer exited: %v\n%s%s", err, out.String(), log)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, bouncerURL)
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return bouncerURL
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer did not answer at %s within 10s: %v\n%s%s", u.Host, err, out.String(), log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
