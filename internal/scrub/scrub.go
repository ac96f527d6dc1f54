// Package scrub keeps secrets (API keys, passwords in URLs) out of error
// text and logs, while keeping the error chain intact for errors.Is and
// errors.As. The adapters and the JetStream consumer wrap with it the
// errors that may quote their secrets; the AMQP and JetStream adapters
// mask their URLs for logs with a RedactURL of their own.
package scrub

import (
	"net/url"
	"strings"
)

// Placeholder replaces a secret in scrubbed text.
const Placeholder = "[redacted]"

// Error prints Msg instead of the text of the error it wraps.
type Error struct {
	Msg string
	Err error
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the original error.
func (e *Error) Unwrap() error { return e.Err }

// Text returns s with every non-empty secret replaced by Placeholder.
func Text(s string, secrets ...string) string {
	for _, secret := range secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, Placeholder)
		}
	}
	return s
}

// Err returns err unchanged when its text holds none of the secrets, and
// otherwise an *Error with the secrets removed from its text that unwraps
// to err. Err(nil) is nil.
func Err(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := Text(msg, secrets...)
	if clean == msg {
		return err
	}
	return &Error{Msg: clean, Err: err}
}

// URLSecrets returns the credentials embedded in rawURL (one URL, or
// several separated by commas): passwords, and user names of three bytes
// or more (shorter ones would scrub ordinary words), each raw and
// URL-escaped, as an error might quote either.
func URLSecrets(rawURL string) []string {
	var out []string
	for _, part := range strings.Split(rawURL, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.User == nil {
			continue
		}
		if p, ok := u.User.Password(); ok && p != "" {
			out = append(out, p, url.QueryEscape(p))
		}
		if n := u.User.Username(); len(n) >= 3 {
			out = append(out, n, url.QueryEscape(n))
		}
	}
	return out
}

// URL returns rawURL (one URL, or several separated by commas) with any
// user name, password or token replaced by Placeholder, for logs and
// errors. A part that cannot be parsed becomes "[unparseable URL]".
func URL(rawURL string) string {
	parts := strings.Split(rawURL, ",")
	for i, part := range parts {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil {
			parts[i] = "[unparseable URL]"
			continue
		}
		if u.User == nil {
			parts[i] = u.String()
			continue
		}
		u.User = nil
		scheme, rest, _ := strings.Cut(u.String(), "://")
		parts[i] = scheme + "://" + Placeholder + "@" + rest
	}
	return strings.Join(parts, ",")
}
