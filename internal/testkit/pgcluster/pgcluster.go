// Package pgcluster runs PostgreSQL servers of a test's own — a primary
// and streaming standbys made from it with pg_basebackup — for the tests
// that stop, promote or cut off a server: the shared server the rest of
// the suite uses is never stopped or reconfigured. It needs Debian's
// postgresql package (initdb, pg_ctl, pg_basebackup); run as root, every
// server runs as the postgres user, as PostgreSQL requires.
package pgcluster

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
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNotInstalled is returned when PostgreSQL's server programs are not
// found.
var ErrNotInstalled = errors.New("PostgreSQL's server programs (initdb, pg_ctl, pg_basebackup) are not installed (apt-get install postgresql)")

// Server is one running PostgreSQL server of a test.
type Server struct {
	// Name is the server's name: the application_name a standby streams
	// under, which synchronous_standby_names refers to.
	Name string
	// Port is the TCP port it listens on, at 127.0.0.1.
	Port int

	bin    string // PostgreSQL's bin directory
	data   string // the data directory
	cred   *syscall.Credential
	cmd    *exec.Cmd  // the postmaster, a child of this process
	exited chan error // receives its exit
}

// Settings are postgresql.conf lines for a primary, by name.
type Settings map[string]string

// StartPrimary creates a cluster in a directory under dir (initdb, trust
// authentication for every local connection and for replication) and
// starts it on a free port with settings added to its configuration.
// dir must be writable; it is not removed.
func StartPrimary(ctx context.Context, dir, name string, settings Settings) (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	s := &Server{Name: name, bin: bin, data: filepath.Join(dir, name)}
	if s.cred, err = serverUser(); err != nil {
		return nil, err
	}
	if err := s.ownDir(dir); err != nil {
		return nil, err
	}
	if err := s.run(ctx, "initdb", "-D", s.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"); err != nil {
		return nil, err
	}
	hba := "local all all trust\nhost all all 127.0.0.1/32 trust\nlocal replication all trust\nhost replication all 127.0.0.1/32 trust\n"
	if err := os.WriteFile(filepath.Join(s.data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return nil, err
	}
	conf := Settings{
		"wal_level": "replica", "max_wal_senders": "5", "wal_keep_size": "'256MB'", "hot_standby": "on",
		"shared_buffers": "'32MB'", "max_connections": "100", "fsync": "off", "full_page_writes": "on",
		"unix_socket_directories": quote(dir), "listen_addresses": "'127.0.0.1'",
		"wal_receiver_status_interval": "'100ms'", "log_min_messages": "warning",
		// A standby cut off from its primary retries this often, and
		// notices a promotion only then.
		"wal_retrieve_retry_interval": "'100ms'",
	}
	for k, v := range settings {
		conf[k] = v
	}
	if err := s.appendConf("postgresql.conf", conf); err != nil {
		return nil, err
	}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// StartStandby makes a streaming standby of s in a directory under dir
// (pg_basebackup, streaming from primaryAddr: s's own address, or a Gate in
// front of it) and starts it on a free port. It streams as name (its
// application_name), so that s's synchronous_standby_names can name it.
func (s *Server) StartStandby(ctx context.Context, dir, name, primaryAddr string) (*Server, error) {
	host, port, err := net.SplitHostPort(primaryAddr)
	if err != nil {
		return nil, err
	}
	st := &Server{Name: name, bin: s.bin, data: filepath.Join(dir, name), cred: s.cred}
	if err := st.run(ctx, "pg_basebackup", "-D", st.data, "-h", host, "-p", port, "-U", "postgres", "-X", "stream", "-c", "fast", "--no-sync", "-R"); err != nil {
		return nil, err
	}
	conninfo := fmt.Sprintf("host=%s port=%s user=postgres application_name=%s", host, port, name)
	// Later lines win: these override what pg_basebackup -R wrote.
	if err := st.appendConf("postgresql.auto.conf", Settings{"primary_conninfo": quote(conninfo)}); err != nil {
		return nil, err
	}
	if err := st.start(ctx); err != nil {
		return nil, err
	}
	return st, nil
}

// Addr is the server's address, host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL is a postgres:// URL of database db on the server.
func (s *Server) URL(db string) string {
	return (&url.URL{Scheme: "postgres", User: url.User("postgres"), Host: s.Addr(), Path: "/" + db, RawQuery: "sslmode=disable"}).String()
}

// MultiHostURL is a postgres:// URL of database db on every server given,
// for a client that must follow the primary through a failover: pgx tries
// them in order and keeps the first that takes writes
// (target_session_attrs=read-write).
func MultiHostURL(db string, servers ...*Server) string {
	hosts := make([]string, len(servers))
	for i, s := range servers {
		hosts[i] = s.Addr()
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2", strings.Join(hosts, ","), db)
}

// Exec runs sql on database db of the server, on a connection of its own.
func (s *Server) Exec(ctx context.Context, db, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, s.URL(db))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// StopImmediately stops the server as a crash would (SIGQUIT: immediate
// shutdown, no checkpoint, every connection cut) and waits for it to exit.
func (s *Server) StopImmediately(ctx context.Context) error {
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-s.exited:
		s.cmd = nil
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pgcluster: %s did not stop: %w", s.Name, ctx.Err())
	}
}

// Promote ends a standby's recovery (pg_ctl promote) and waits until it
// takes writes.
func (s *Server) Promote(ctx context.Context) error {
	return s.run(ctx, "pg_ctl", "-D", s.data, "-w", "-t", "60", "promote")
}

// Configure sets settings with ALTER SYSTEM and reloads the configuration:
// for those that must wait until the server is up (a
// synchronous_standby_names naming a standby made after it).
func (s *Server) Configure(ctx context.Context, settings Settings) error {
	for _, k := range sortedNames(settings) {
		if err := s.Exec(ctx, "postgres", fmt.Sprintf("ALTER SYSTEM SET %s = %s", pgx.Identifier{k}.Sanitize(), settings[k])); err != nil {
			return err
		}
	}
	return s.Exec(ctx, "postgres", "SELECT pg_reload_conf()")
}

// Stop stops the server if it runs, at once, and ignores any error: for
// a test's cleanup.
func (s *Server) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = s.StopImmediately(ctx)
}

// start runs the postmaster on a free port as a child of this process,
// which dies with it (Pdeathsig): a test that panics or times out leaves
// no server behind. It returns once the server accepts connections.
func (s *Server) start(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.Port = port
	if err := s.appendConf("postgresql.auto.conf", Settings{"port": strconv.Itoa(port)}); err != nil {
		return err
	}
	log, err := os.OpenFile(s.data+".log", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", s.data)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGQUIT}
	cmd.Stdout, cmd.Stderr, cmd.Dir = log, log, os.TempDir()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgcluster: start %s: %w", s.Name, err)
	}
	s.cmd, s.exited = cmd, make(chan error, 1)
	go func() { s.exited <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		attempt, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(attempt, s.URL("postgres"))
		cancel()
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case exitErr := <-s.exited:
			s.cmd = nil
			return fmt.Errorf("pgcluster: %s exited at start: %v\n%s", s.Name, exitErr, s.log())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Stop()
			return fmt.Errorf("pgcluster: %s did not accept connections within 60s: %v\n%s", s.Name, err, s.log())
		}
	}
}

func (s *Server) log() string {
	b, _ := os.ReadFile(s.data + ".log")
	return tail(b, 4000)
}

// appendConf appends settings to a configuration file of the data
// directory, in name order.
func (s *Server) appendConf(file string, settings Settings) error {
	var b strings.Builder
	b.WriteString("\n# added by pgcluster\n")
	for _, k := range sortedNames(settings) {
		fmt.Fprintf(&b, "%s = %s\n", k, settings[k])
	}
	f, err := os.OpenFile(filepath.Join(s.data, file), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// run runs one of PostgreSQL's programs as the server's user; its output
// is in the error when it fails, with the server's log.
func (s *Server) run(ctx context.Context, program string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, program), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	cmd.Dir = os.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: %s %s: %w\n%s%s", program, strings.Join(args, " "), err, out, s.log())
	}
	return nil
}

// ownDir gives dir to the server's user, which must write there.
func (s *Server) ownDir(dir string) error {
	if s.cred == nil {
		return nil
	}
	return os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid))
}

// serverUser is the user the servers run as: nil (this process's own)
// unless this process is root, which PostgreSQL refuses to run as.
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: running as root, and no postgres user to run the servers as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// binDir finds PostgreSQL's server programs: pg_config's bindir, else
// Debian's newest /usr/lib/postgresql/*/bin.
func binDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", ErrNotInstalled
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func sortedNames(settings Settings) []string {
	names := make([]string, 0, len(settings))
	for k := range settings {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
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

// QueryRow runs sql on database db of the server, on a connection of its
// own, and scans its one row into dest.
func (s *Server) QueryRow(ctx context.Context, db, sql string, dest ...any) error {
	conn, err := pgx.Connect(ctx, s.URL(db))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, sql).Scan(dest...)
}
