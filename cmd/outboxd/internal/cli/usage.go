package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
)

// version is outboxd's version, set at build time:
//
//	go build -ldflags "-X github.com/outboxkit/outbox/cmd/outboxd/internal/cli.version=v0.2.0" ./cmd/outboxd
//
// (make build passes `git describe --tags --always --dirty`). Empty, Version
// falls back to the module version `go install ...@v0.2.0` records, then
// "dev".
var version string

// Version is outboxd's version: the one set at build time, else the
// module's version from the build info, else "dev".
func Version() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "dev"
}

// printFlags lists fs's flags in the --flag style the README uses:
//
//	--name type
//	      usage (default value)
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		typ, text := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if typ != "" {
			line += " " + typ
		}
		text = strings.ReplaceAll(text, "\n", "\n        ")
		def := f.DefValue
		if f.Name == "database-url" {
			def = redactURL(def)
		}
		switch def {
		case "", "0", "false", "0s", "[]":
		default:
			if typ == "string" || typ == "URL" {
				text += fmt.Sprintf(" (default %q)", def)
			} else {
				text += fmt.Sprintf(" (default %s)", def)
			}
		}
		fmt.Fprintf(w, "%s\n        %s\n", line, text)
	})
}

// redactURL hides a URL's password, for help and hints.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); !has {
		return raw
	}
	return u.Redacted()
}

// parseFlags parses args into fs. --help prints the command's help on
// stdout; any other error is one line, in --flag style, with a suggestion
// for a mistyped flag and a pointer to --help, instead of the flag
// package's error followed by every flag's description.
func parseFlags(fs *flag.FlagSet, args []string, env Env) error {
	help := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = help
	fs.SetOutput(env.Stderr)
	if err == nil {
		return nil
	}
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(env.Stdout)
		help()
		fs.SetOutput(env.Stderr)
		return err
	}
	return fmt.Errorf("%w: %s; see 'outboxd %s --help'", errUsage, flagError(fs, err), fs.Name())
}

// flagError rewrites one of the flag package's errors in --flag style.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		name = strings.TrimPrefix(name, "-")
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if c := closest(name, names); c != "" {
			return fmt.Sprintf("unknown flag --%s (did you mean --%s?)", name, c)
		}
		return fmt.Sprintf("unknown flag --%s", name)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Sprintf("flag --%s needs a value", strings.TrimPrefix(name, "-"))
	}
	return flagDash.ReplaceAllString(msg, "${1}--${2}")
}

// flagDash finds a flag named with one dash in the flag package's errors
// ("for flag -workers", "for -json").
var flagDash = regexp.MustCompile(`(for (?:flag )?)-([a-z])`)

// didYouMean returns ` (did you mean "x"?)` when a candidate is close
// enough to word to be a likely typo of it, else "".
func didYouMean(word string, candidates []string) string {
	if c := closest(word, candidates); c != "" {
		return fmt.Sprintf(" (did you mean %q?)", c)
	}
	return ""
}

// closest returns the candidate nearest to word if it is close enough to
// be a likely typo of it, else "".
func closest(word string, candidates []string) string {
	best, bestDist := "", -1
	sorted := append([]string(nil), candidates...)
	sort.Strings(sorted)
	for _, c := range sorted {
		d := editDistance(strings.ToLower(word), strings.ToLower(c))
		if len(word) >= 3 && strings.HasPrefix(c, word) {
			d = min(d, 1)
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	limit := 2
	if len([]rune(word)) <= 4 {
		limit = 1
	}
	if best == "" || bestDist > limit || bestDist == 0 {
		return ""
	}
	return best
}

// editDistance is the Damerau-Levenshtein (optimal string alignment)
// distance: a swap of two neighbouring letters costs one, like a typo.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// configFlags maps the Go fields that library errors name (dispatcher's
// "Config.DedupWindow") to the flags that set them, so CLI output names
// what the user can change.
var configFlags = map[string]string{
	"Providers":            "--providers",
	"MaxWorkers":           "--workers",
	"MaxAttempts":          "--max-attempts",
	"CallTimeout":          "--call-timeout",
	"RetryBackoff":         "--retry-backoff",
	"RetryBackoffMax":      "--retry-backoff-max",
	"SweepInterval":        "--sweep-interval",
	"RescueStuckJobsAfter": "--rescue-after",
	"FetchCooldown":        "--fetch-cooldown",
	"FetchLoops":           "--fetch-loops",
	"DedupWindow":          "--dedup-window",
	"AuditRetention":       "--audit-retention",
	"MaxPayloadBytes":      "--max-payload-bytes",
}

var configField = func() *regexp.Regexp {
	names := make([]string, 0, len(configFlags))
	for n := range configFlags {
		names = append(names, n)
	}
	// Longest first, so RetryBackoffMax is not read as RetryBackoff.
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	return regexp.MustCompile(`\b(?:Config\.)?(` + strings.Join(names, "|") + `)\b`)
}()

// cliMessage is err's text as the CLI prints it: a library error that
// names Go configuration fields names the flags instead.
func cliMessage(err error) string {
	msg := err.Error()
	if !strings.Contains(msg, "Config.") {
		return msg
	}
	msg = strings.ReplaceAll(msg, "dispatcher: ", "")
	return configField.ReplaceAllStringFunc(msg, func(m string) string {
		return configFlags[strings.TrimPrefix(m, "Config.")]
	})
}
