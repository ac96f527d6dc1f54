package sendgriddouble

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ActivityMessage is one row of the Email Activity API's
// GET /v3/messages answer. SendGrid lists one row per recipient; its msg_id
// starts with the X-Message-Id the send was answered with, followed by a
// "." and a per-recipient suffix.
type ActivityMessage struct {
	// MsgID is "<X-Message-Id>.<recipient suffix>".
	MsgID string `json:"msg_id"`
	// FromEmail is the sender's address.
	FromEmail string `json:"from_email"`
	// Subject is the email's subject.
	Subject string `json:"subject"`
	// ToEmail is this row's recipient (to, cc or bcc).
	ToEmail string `json:"to_email"`
	// Status is always "delivered" in the double.
	Status string `json:"status"`
	// OpensCount and ClicksCount are always 0 in the double.
	OpensCount  int `json:"opens_count"`
	ClicksCount int `json:"clicks_count"`
	// LastEventTime is when the email was accepted, in RFC 3339 (UTC).
	LastEventTime string `json:"last_event_time"`
}

// ActivityResponse is the body of GET /v3/messages.
type ActivityResponse struct {
	// Messages lists matching rows, most recent first, at most limit.
	Messages []ActivityMessage `json:"messages"`
}

// uniqueArgsQuery matches unique_args['KEY']="VALUE", SendGrid's query for
// a custom argument.
var uniqueArgsQuery = regexp.MustCompile(`^unique_args\['([^']+)'\]\s*=\s*"([^"]*)"$`)

// parseActivityQuery returns the custom argument a query filters on. One
// pair of surrounding parentheses is allowed, as SendGrid's console writes
// queries.
func parseActivityQuery(q string) (key, value string, ok bool) {
	q = strings.TrimSpace(q)
	if strings.HasPrefix(q, "(") && strings.HasSuffix(q, ")") {
		q = strings.TrimSpace(q[1 : len(q)-1])
	}
	m := uniqueArgsQuery.FindStringSubmatch(q)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	now := s.cfg.Now()
	limitPerMinute := s.cfg.ActivityRequestsPerMinute
	s.mu.Lock()
	count, reset := s.activityWind.hit(now)
	s.mu.Unlock()
	if limitPerMinute > 0 {
		setRateLimitHeaders(w, limitPerMinute, limitPerMinute-count, reset)
	} else {
		setRateLimitHeaders(w, ActivityRateLimit, ActivityRateLimit, reset)
	}

	if r.Method != http.MethodGet {
		writeErrors(w, http.StatusMethodNotAllowed, apiError{Message: "method not allowed"})
		return
	}
	if !s.authorized(r) {
		writeErrors(w, http.StatusUnauthorized, apiError{Message: msgUnauthorized})
		return
	}
	if limitPerMinute > 0 && count > limitPerMinute {
		writeErrors(w, http.StatusTooManyRequests, apiError{Message: msgTooManyRequests})
		return
	}

	params := r.URL.Query()
	limit := 10
	if raw := params.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > 1000 {
			writeErrors(w, http.StatusBadRequest, fieldError("limit", "limit must be an integer from 1 to 1000"))
			return
		}
		limit = n
	}
	key, value, ok := parseActivityQuery(params.Get("query"))
	if !ok {
		writeErrors(w, http.StatusBadRequest, fieldError("query", fmt.Sprintf("invalid query: the double only understands unique_args['KEY']=\"VALUE\", got %q", params.Get("query"))))
		return
	}

	resp := ActivityResponse{Messages: []ActivityMessage{}}
	s.mu.Lock()
	// Most recent first, as SendGrid lists them.
	for i := len(s.emails) - 1; i >= 0 && len(resp.Messages) < limit; i-- {
		e := s.emails[i]
		if !e.hasArg(key, value) {
			continue
		}
		recipients := append(append(append([]string(nil), e.To...), e.Cc...), e.Bcc...)
		for j, to := range recipients {
			if len(resp.Messages) == limit {
				break
			}
			resp.Messages = append(resp.Messages, ActivityMessage{
				MsgID:         fmt.Sprintf("%s.filterdrecv-double-1-%X-%d.0", e.MessageID, e.AcceptedAt.Unix(), j),
				FromEmail:     e.From,
				Subject:       e.Subject,
				ToEmail:       to,
				Status:        "delivered",
				LastEventTime: e.AcceptedAt.UTC().Format(time.RFC3339),
			})
		}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func (e Email) hasArg(key, value string) bool {
	for _, args := range e.personalizationArgs {
		if v, ok := args[key]; ok && v == value {
			return true
		}
	}
	return false
}
