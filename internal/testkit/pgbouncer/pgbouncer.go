// Package pgbouncer starts a PgBouncer (Debian's pgbouncer) in transaction
// pooling mode in front of a PostgreSQL server, for the tests and the
// bench rows that run the outbox behind a pooler.
package pgbouncer

import (
	"context"
	"errors"
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

// ErrNotInstalled is returned by Start when no pgbouncer executable is
// found.
var ErrNotInstalled = errors.New("pgbouncer is not installed (apt-get install pgbouncer)")

// Server is a running PgBouncer.
type Server struct {
	cmd    *exec.Cmd
	dir    string
	addr   string
	exited chan error
}

// Start starts a PgBouncer in transaction pooling mode in front of the
// server of upstreamURL (any database name, the user of the URL, trust
// authentication towards the client), with up to poolSize server
// connections for each database, and waits until it answers. It keeps no
// prepared statements for its clients (1.18 cannot): a client must not
// prepare (pgx: default_query_exec_mode=exec).
func Start(ctx context.Context, upstreamURL string, poolSize int) (*Server, error) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer"
		if _, statErr := os.Stat(bin); statErr != nil {
			return nil, ErrNotInstalled
		}
	}
	u, err := url.Parse(upstreamURL)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: parse the upstream URL: %w", err)
	}
	upstreamPort := u.Port()
	if upstreamPort == "" {
		upstreamPort = "5432"
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), exited: make(chan error, 1)}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 500
default_pool_size = %d
server_reset_query =
logfile = %s
`, u.Hostname(), upstreamPort, port, filepath.Join(dir, "users.txt"), poolSize, filepath.Join(dir, "pgbouncer.log"))
	files := map[string]string{"pgbouncer.ini": ini, "users.txt": fmt.Sprintf("%q \"\"\n", u.User.Username())}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	// PgBouncer refuses to run as root; as root it can drop to another
	// user (-u), which must be able to read its files and write its log.
	if os.Geteuid() == 0 {
		if err := chownTo(dir, "postgres", "pgbouncer.ini", "users.txt"); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		args = append([]string{"-u", "postgres"}, args...)
	}
	// What it prints before its log file is open (a bad setting) goes to
	// a file beside the log.
	out, err := os.Create(filepath.Join(dir, "output.txt"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer out.Close()
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgbouncer: start: %w", err)
	}
	go func() { s.exited <- s.cmd.Wait() }()
	if err := s.waitReady(ctx, u); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// URL is dbURL (a URL of the upstream server) pointed at the pooler.
func (s *Server) URL(dbURL string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", err
	}
	u.Host = s.addr
	return u.String(), nil
}

// Close stops the pooler and removes its files.
func (s *Server) Close() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	os.RemoveAll(s.dir)
}

// waitReady connects through the pooler until it answers, for at most
// 10 s; a pooler that exits meanwhile is reported with its log.
func (s *Server) waitReady(ctx context.Context, upstream *url.URL) error {
	u := *upstream
	u.Host = s.addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-s.exited:
			s.exited <- err
			return fmt.Errorf("pgbouncer exited: %v\n%s", err, s.log())
		default:
		}
		attempt, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(attempt, u.String())
		if err == nil {
			err = conn.Ping(attempt)
			conn.Close(attempt)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("pgbouncer did not answer at %s within 10s: %v\n%s", s.addr, err, s.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Server) log() string {
	out, _ := os.ReadFile(filepath.Join(s.dir, "output.txt"))
	log, _ := os.ReadFile(filepath.Join(s.dir, "pgbouncer.log"))
	return string(out) + string(log)
}

func chownTo(dir, userName string, files ...string) error {
	pg, err := user.Lookup(userName)
	if err != nil {
		return fmt.Errorf("pgbouncer: running as root, and no %s user to run it as: %w", userName, err)
	}
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	paths := []string{dir}
	for _, f := range files {
		paths = append(paths, filepath.Join(dir, f))
	}
	for _, p := range paths {
		if err := os.Chown(p, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ForTest starts a pooler as Start does in front of the server of dbURL,
// stopped when t ends, and returns dbURL pointed at it. A missing
// pgbouncer skips the test, or fails it under CI=true (make test installs
// it).
func ForTest(t testing.TB, dbURL string) string {
	t.Helper()
	s, err := Start(context.Background(), dbURL, 20)
	if errors.Is(err, ErrNotInstalled) {
		if os.Getenv("CI") == "true" {
			t.Fatal("pgbouncer is not installed, and CI=true: install it (apt-get install pgbouncer); make test does")
		}
		t.Skip("pgbouncer is not installed (apt-get install pgbouncer); skipped outside CI")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	u, err := s.URL(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
