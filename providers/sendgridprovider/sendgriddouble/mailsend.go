package sendgriddouble

import (
	"compress/gzip"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/mail"
	"strings"
	"time"

	"github.com/outboxkit/outbox/providers/fault"
)

// mailRequest is the part of SendGrid's v3 Mail Send body the double reads.
// Fields it does not read (asm, tracking_settings, ...) are accepted and
// ignored, as far as recording is concerned. So is a top-level
// dynamic_template_data, which is not part of SendGrid's API: SendGrid
// renders a dynamic template with personalizations[].dynamic_template_data
// alone.
type mailRequest struct {
	Personalizations []personalization `json:"personalizations"`
	From             *address          `json:"from"`
	ReplyTo          *address          `json:"reply_to"`
	Subject          string            `json:"subject"`
	Content          []content         `json:"content"`
	TemplateID       string            `json:"template_id"`
	Attachments      []attachment      `json:"attachments"`
	CustomArgs       map[string]string `json:"custom_args"`
	Categories       []string          `json:"categories"`
	SendAt           int64             `json:"send_at"`
	MailSettings     *struct {
		SandboxMode *struct {
			Enable bool `json:"enable"`
		} `json:"sandbox_mode"`
	} `json:"mail_settings"`
}

type personalization struct {
	To                  []address                  `json:"to"`
	Cc                  []address                  `json:"cc"`
	Bcc                 []address                  `json:"bcc"`
	Subject             string                     `json:"subject"`
	CustomArgs          map[string]string          `json:"custom_args"`
	SendAt              int64                      `json:"send_at"`
	DynamicTemplateData map[string]json.RawMessage `json:"dynamic_template_data"`
}

// attachment is one of attachments[]; Type is a pointer to tell an empty
// type, which SendGrid refuses, from none.
type attachment struct {
	Content     string  `json:"content"`
	Filename    string  `json:"filename"`
	Type        *string `json:"type"`
	Disposition string  `json:"disposition"`
	ContentID   string  `json:"content_id"`
}

type address struct {
	Email string `json:"email"`
	Name  string `json:"name"`
}

type content struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

func (s *Server) authorized(r *http.Request) bool {
	got := r.Header.Get("Authorization")
	want := "Bearer " + s.cfg.APIKey
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// handleMailSend answers POST /v3/mail/send. Every POST counts against the
// rate window, a refused one included; the key is checked before a fault is
// drawn, so a fault never hides a bad key, and the body is read after.
func (s *Server) handleMailSend(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeErrors(w, http.StatusMethodNotAllowed, apiError{Message: "method not allowed"})
		return
	}
	now := s.cfg.Now()
	s.countMailSend(w, now)
	if !s.admitMailSend(w, r) {
		return
	}
	f := s.faults.Next()
	if s.failBeforeReading(w, f, now) {
		return
	}
	req, ok := readMailRequest(w, r, now)
	if !ok {
		return
	}
	if req.sandboxed() {
		// Sandbox mode: validated, not sent, 200 with no message id.
		w.WriteHeader(http.StatusOK)
		return
	}
	email := req.email(newMessageID(), now)
	s.record(email)
	s.countApplied(f.Kind)
	s.answerAccepted(w, r, f, email.MessageID)
}

// countMailSend counts the request, refused ones included, in the double's
// requests and in the mail send rate window, whose state it reports in the
// X-RateLimit headers.
func (s *Server) countMailSend(w http.ResponseWriter, now time.Time) {
	s.mu.Lock()
	s.requests++
	count, reset := s.sendWindow.hit(now)
	s.mu.Unlock()
	setRateLimitHeaders(w, MailSendRateLimit, MailSendRateLimit-count, reset)
}

// admitMailSend checks the request's API key and the account's state,
// answering the request itself when it is refused.
func (s *Server) admitMailSend(w http.ResponseWriter, r *http.Request) bool {
	if !s.authorized(r) {
		writeErrors(w, http.StatusUnauthorized, apiError{Message: msgUnauthorized})
		return false
	}
	if status, msg := s.authFailureAnswer(); status != 0 {
		writeErrors(w, status, apiError{Message: msg})
		return false
	}
	return true
}

// failBeforeReading applies a fault that refuses the request before its
// body is read (fault.RateLimit, fault.ErrorBefore), and reports whether it
// answered.
func (s *Server) failBeforeReading(w http.ResponseWriter, f fault.Fault, now time.Time) bool {
	switch f.Kind {
	case fault.RateLimit:
		s.countApplied(f.Kind)
		setRateLimitHeaders(w, MailSendRateLimit, 0, now.Add(f.RetryAfterOrDefault()))
		writeErrors(w, http.StatusTooManyRequests, apiError{Message: msgTooManyRequests})
		return true
	case fault.ErrorBefore:
		s.countApplied(f.Kind)
		writeErrors(w, f.StatusOr500(), apiError{Message: statusMessage(f.StatusOr500())})
		return true
	}
	return false
}

// readMailRequest reads and validates the body, answering the request
// itself (413, 400, or 403 for an unverified sender) when it is refused.
func readMailRequest(w http.ResponseWriter, r *http.Request, now time.Time) (*mailRequest, bool) {
	body, tooLarge, err := readBody(r)
	if tooLarge {
		writeErrors(w, http.StatusRequestEntityTooLarge, apiError{Message: msgTooLarge})
		return nil, false
	}
	if err != nil {
		writeErrors(w, http.StatusBadRequest, apiError{Message: err.Error()})
		return nil, false
	}
	req, errs := parseMailRequest(body, now)
	if len(errs) > 0 {
		writeErrors(w, http.StatusBadRequest, errs...)
		return nil, false
	}
	if strings.EqualFold(req.From.Email, UnverifiedSender) {
		writeErrors(w, http.StatusForbidden, fieldError("from", msgUnverifiedSender))
		return nil, false
	}
	return req, true
}

func (req *mailRequest) sandboxed() bool {
	return req.MailSettings != nil && req.MailSettings.SandboxMode != nil && req.MailSettings.SandboxMode.Enable
}

// answerAccepted answers a recorded email: 202 with its X-Message-Id, unless
// the fault drawn for the request fails, drops or delays the answer.
func (s *Server) answerAccepted(w http.ResponseWriter, r *http.Request, f fault.Fault, messageID string) {
	switch f.Kind {
	case fault.ErrorAfter:
		writeErrors(w, f.StatusOr500(), apiError{Message: statusMessage(f.StatusOr500())})
		return
	case fault.LoseResponse:
		fault.DropConnection(w)
		return
	case fault.Delay:
		timer := time.NewTimer(f.Delay)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-r.Context().Done():
			return // the client gave up: nobody to answer
		case <-s.closed:
			return
		}
	}
	if f.Kind == fault.BadReference {
		w.Header()["X-Message-Id"] = []string{fault.BadReferenceValue()}
	} else {
		w.Header().Set("X-Message-Id", messageID)
	}
	w.WriteHeader(http.StatusAccepted)
}

func statusMessage(status int) string {
	if text := http.StatusText(status); text != "" {
		return strings.ToLower(text)
	}
	return fmt.Sprintf("error %d", status)
}

// readBody reads a mail send body, decompressing it when it is gzipped (as
// sendgrid-go does with "Content-Encoding: gzip").
func readBody(r *http.Request) (body []byte, tooLarge bool, err error) {
	if r.ContentLength >= MaxBodyBytes {
		return nil, true, nil
	}
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mediaType != "application/json" {
		//lint:ignore ST1005 SendGrid's own message, sent verbatim to the client
		return nil, false, errors.New("Content-Type should be application/json.")
	}
	var src io.Reader = r.Body
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(io.LimitReader(r.Body, MaxBodyBytes))
		if err != nil {
			//lint:ignore ST1005 SendGrid's own message, sent verbatim to the client
			return nil, false, errors.New("Bad Request")
		}
		defer zr.Close()
		src = zr
	}
	body, err = io.ReadAll(io.LimitReader(src, MaxBodyBytes))
	if err != nil {
		//lint:ignore ST1005 SendGrid's own message, sent verbatim to the client
		return nil, false, errors.New("Bad Request")
	}
	if len(body) >= MaxBodyBytes {
		return nil, true, nil
	}
	return body, false, nil
}

// parseMailRequest decodes and validates a body the way SendGrid does,
// returning every problem found.
func parseMailRequest(body []byte, now time.Time) (*mailRequest, []apiError) {
	req, decodeErr := decodeMailRequest(body)
	if decodeErr != nil {
		return nil, []apiError{*decodeErr}
	}
	var errs mailErrors
	errs.checkSender(req)
	errs.checkPersonalizations(req, now)
	errs.checkSubject(req)
	errs.checkContent(req)
	errs.checkTemplate(req.TemplateID)
	errs.checkAttachments(req.Attachments)
	errs.checkCategories(req.Categories)
	errs.checkMessageSettings(req, now)
	if len(errs) > 0 {
		return nil, errs
	}
	return req, nil
}

// decodeMailRequest decodes body. A value of the wrong JSON type is the
// only decoding error SendGrid names a field for.
func decodeMailRequest(body []byte) (*mailRequest, *apiError) {
	var req mailRequest
	err := json.Unmarshal(body, &req)
	if err == nil {
		return &req, nil
	}
	var typeErr *json.UnmarshalTypeError
	if !errors.As(err, &typeErr) {
		return nil, &apiError{Message: "Bad Request"}
	}
	field := typeErr.Field
	if field == "" {
		field = "(root)"
	}
	e := fieldError(field, fmt.Sprintf("Invalid type. Expected: %s, given: %s.", typeErr.Type.Kind(), typeErr.Value))
	return nil, &e
}

// mailErrors collects the problems of one mail send request, each naming
// its field, in the order they were found.
type mailErrors []apiError

func (errs *mailErrors) add(field, format string, args ...any) {
	*errs = append(*errs, fieldError(field, fmt.Sprintf(format, args...)))
}

func (errs *mailErrors) checkSender(req *mailRequest) {
	switch {
	case req.From == nil || req.From.Email == "":
		errs.add("from.email", `The from object must be provided for every email send. It is an object that requires the email parameter, but may also contain a name parameter.  e.g. {"email" : "example@example.com"}  or {"email" : "example@example.com", "name" : "Example Recipient"}.`)
	case !validAddress(req.From.Email):
		errs.add("from.email", "The from email does not contain a valid address.")
	}
	if req.ReplyTo != nil && !validAddress(req.ReplyTo.Email) {
		errs.add("reply_to.email", "The reply_to email does not contain a valid address.")
	}
}

func (errs *mailErrors) checkPersonalizations(req *mailRequest, now time.Time) {
	switch n := len(req.Personalizations); {
	case n == 0:
		errs.add("personalizations", "The personalizations field is required and must have at least one personalization.")
	case n > MaxPersonalizations:
		errs.add("personalizations", "You may not have more than %d personalizations per API request. You may need to batch your request into multiple API calls.", MaxPersonalizations)
	}
	firstIn := map[string]int{} // lower-cased address -> first personalization with it
	for i, p := range req.Personalizations {
		errs.checkRecipients(i, p, firstIn)
		errs.checkPersonalizationSettings(i, p, req.CustomArgs, now)
	}
	if recipientCount(req.Personalizations) > MaxRecipients {
		errs.add("personalizations", "The total number of recipients must be no more than %d. This includes all recipients defined within the to, cc, and bcc parameters, across each object that you include in the personalizations array.", MaxRecipients)
	}
}

// recipientList is one of a personalization's to, cc and bcc, with the
// name of its field.
type recipientList struct {
	name  string
	addrs []address
}

func recipientLists(p personalization) []recipientList {
	return []recipientList{{"to", p.To}, {"cc", p.Cc}, {"bcc", p.Bcc}}
}

// checkRecipients checks the addresses of personalization i. An address
// may appear once in a personalization, across to, cc and bcc, and in one
// personalization only: firstIn records where each was first seen.
func (errs *mailErrors) checkRecipients(i int, p personalization, firstIn map[string]int) {
	if len(p.To) == 0 {
		errs.add(fmt.Sprintf("personalizations.%d.to", i), "The to array is required for all personalization objects, and must have at least one email object with a valid email address.")
	}
	seen := map[string]bool{}
	for _, list := range recipientLists(p) {
		for j, a := range list.addrs {
			field := fmt.Sprintf("personalizations.%d.%s.%d.email", i, list.name, j)
			if !validAddress(a.Email) {
				errs.add(field, "Does not contain a valid address.")
				continue
			}
			if strings.ContainsAny(a.Name, ",;") {
				errs.add(fmt.Sprintf("personalizations.%d.%s.%d.name", i, list.name, j), "The name of a recipient cannot contain ';' or ',' characters.")
			}
			key := strings.ToLower(a.Email)
			if seen[key] {
				errs.add(field, "Each email address in the personalization block should be unique between to, cc, and bcc. We found the first duplicate instance of [%s] in the personalizations.%d.%s field.", a.Email, i, list.name)
			} else if first, again := firstIn[key]; again && first != i {
				errs.add(field, "Each unique email address in the personalizations array should only be included once. You have included [%s] more than once.", a.Email)
			}
			seen[key] = true
			if _, ok := firstIn[key]; !ok {
				firstIn[key] = i
			}
		}
	}
}

// checkPersonalizationSettings checks personalization i's own custom_args
// (with the request's merged in, as they are sent), template data and
// send_at.
func (errs *mailErrors) checkPersonalizationSettings(i int, p personalization, requestArgs map[string]string, now time.Time) {
	if size := customArgsSize(mergeArgs(requestArgs, p.CustomArgs)); size >= MaxCustomArgsBytes {
		errs.add(fmt.Sprintf("personalizations.%d.custom_args", i), "The custom_args must be less than %d bytes in total; these are %d bytes.", MaxCustomArgsBytes, size)
	}
	if p.DynamicTemplateData != nil {
		if b, _ := json.Marshal(p.DynamicTemplateData); len(b) > MaxTemplateDataBytes {
			errs.add(fmt.Sprintf("personalizations.%d.dynamic_template_data", i), "The dynamic_template_data must be no more than %d bytes; these are %d bytes.", MaxTemplateDataBytes, len(b))
		}
	}
	if p.SendAt > now.Add(MaxSendAtAhead).Unix() {
		errs.add(fmt.Sprintf("personalizations.%d.send_at", i), "The send_at parameter cannot be scheduled more than 72 hours in advance.")
	}
}

// recipientCount counts every address of every personalization, a
// repeated or invalid one included.
func recipientCount(ps []personalization) int {
	n := 0
	for _, p := range ps {
		n += len(p.To) + len(p.Cc) + len(p.Bcc)
	}
	return n
}

func (errs *mailErrors) checkSubject(req *mailRequest) {
	everyHasSubject := len(req.Personalizations) > 0
	for _, p := range req.Personalizations {
		if p.Subject == "" {
			everyHasSubject = false
		}
	}
	if req.Subject == "" && !everyHasSubject && req.TemplateID == "" {
		errs.add("subject", "The subject is required. You can get around this requirement if you use a template with a subject defined or if every personalization has a subject defined.")
	}
}

func (errs *mailErrors) checkContent(req *mailRequest) {
	if len(req.Content) == 0 && req.TemplateID == "" {
		errs.add("content", "Unless a valid template_id is provided, the content parameter is required. There must be at least one defined content block. We typically suggest both text/plain and text/html blocks are included, but only one block is required.")
	}
	for i, c := range req.Content {
		if c.Type == "" || strings.ContainsAny(c.Type, ";\r\n") {
			errs.add(fmt.Sprintf("content.%d.type", i), "The content type cannot contain ';', or CRLF characters. The content type must be a string at least one character in length.")
		}
		if c.Value == "" {
			errs.add(fmt.Sprintf("content.%d.value", i), "The content value must be a string at least one character in length.")
		}
		if i > 0 && contentRank(c.Type) < contentRank(req.Content[i-1].Type) {
			errs.add(fmt.Sprintf("content.%d.type", i), "If present, text/plain and text/html may only be provided in order, with text/plain first, followed by text/html, then followed by any other content.")
		}
	}
}

// contentRank is a content type's place in the order SendGrid requires of
// content blocks: text/plain, then text/html, then any other.
func contentRank(contentType string) int {
	switch strings.ToLower(contentType) {
	case "text/plain":
		return 0
	case "text/html":
		return 1
	}
	return 2
}

func (errs *mailErrors) checkTemplate(id string) {
	if id != "" && !knownTemplate(id) {
		errs.add("template_id", "The Template ID must be a valid template id for your account. You provided %s.", id)
	}
}

func (errs *mailErrors) checkAttachments(attachments []attachment) {
	for i, a := range attachments {
		field := func(name string) string { return fmt.Sprintf("attachments.%d.%s", i, name) }
		switch {
		case a.Content == "":
			errs.add(field("content"), "The attachment content must be a string at least one character in length.")
		case !validBase64(a.Content):
			errs.add(field("content"), "The attachment content must be base64 encoded.")
		}
		switch {
		case a.Filename == "":
			errs.add(field("filename"), "filename is required.")
		case strings.ContainsAny(a.Filename, "\r\n;,"):
			errs.add(field("filename"), "The filename of your attachment can't contain CRLF characters.")
		}
		if a.Type != nil {
			switch {
			case *a.Type == "":
				errs.add(field("type"), "The attachment type must be a string and at least one character in length.")
			case strings.ContainsAny(*a.Type, "\r\n;,"):
				errs.add(field("type"), "The type can't contain ';', or CRLF characters.")
			}
		}
		if a.Disposition != "" && a.Disposition != "inline" && a.Disposition != "attachment" {
			errs.add(field("disposition"), `The disposition of your attachment can be either "inline" or "attachment". You provided %s.`, a.Disposition)
		}
		if strings.ContainsAny(a.ContentID, "\r\n;") {
			errs.add(field("content_id"), "The content ID of your attachment can't contain CRLF characters.")
		}
	}
}

func (errs *mailErrors) checkCategories(categories []string) {
	if len(categories) > MaxCategories {
		errs.add("categories", "Too many categories on this message. The maximum number of categories is %d.", MaxCategories)
	}
	seen := map[string]bool{}
	for i, c := range categories {
		field := fmt.Sprintf("categories.%d", i)
		if len(c) > 255 {
			errs.add(field, "A category cannot have more than 255 characters.")
		}
		if !printableASCII(c) {
			errs.add(field, "Categories can only contain ASCII characters.")
		}
		if seen[c] {
			errs.add(field, "The categories must be unique. You have included the category [%s] more than once.", c)
		}
		seen[c] = true
	}
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// checkMessageSettings checks the request-wide custom_args and send_at.
func (errs *mailErrors) checkMessageSettings(req *mailRequest, now time.Time) {
	if size := customArgsSize(req.CustomArgs); size >= MaxCustomArgsBytes {
		errs.add("custom_args", "The custom_args must be less than %d bytes in total; these are %d bytes.", MaxCustomArgsBytes, size)
	}
	if req.SendAt > now.Add(MaxSendAtAhead).Unix() {
		errs.add("send_at", "The send_at parameter cannot be scheduled more than 72 hours in advance.")
	}
}

// email is what the double records for an accepted request: one Delivery
// per recipient of every personalization, as SendGrid sends one email to
// each.
func (req *mailRequest) email(id string, now time.Time) Email {
	e := Email{MessageID: id, From: req.From.Email, Subject: req.Subject, TemplateID: req.TemplateID, AcceptedAt: now}
	for _, a := range req.Attachments {
		e.Attachments = append(e.Attachments, a.Filename)
	}
	for i, p := range req.Personalizations {
		if e.Subject == "" {
			e.Subject = p.Subject
		}
		args := mergeArgs(req.CustomArgs, p.CustomArgs)
		if i == 0 {
			e.CustomArgs = args
		}
		e.personalizationArgs = append(e.personalizationArgs, args)
		// SendGrid renders each personalization with its own data only.
		var data json.RawMessage
		if req.TemplateID != "" && p.DynamicTemplateData != nil {
			data, _ = json.Marshal(p.DynamicTemplateData)
		}
		for _, list := range []struct {
			field string
			addrs []address
			dst   *[]string
		}{{"to", p.To, &e.To}, {"cc", p.Cc, &e.Cc}, {"bcc", p.Bcc, &e.Bcc}} {
			for _, a := range list.addrs {
				*list.dst = append(*list.dst, a.Email)
				e.Deliveries = append(e.Deliveries, Delivery{
					MessageID:           id,
					Personalization:     i,
					Field:               list.field,
					Recipient:           a.Email,
					IntentID:            args["intent_id"],
					TemplateID:          req.TemplateID,
					DynamicTemplateData: data,
					Attachments:         e.Attachments,
				})
			}
		}
	}
	e.Categories = append([]string(nil), req.Categories...)
	return e
}

// knownTemplate reports whether the double's account has a template of
// that id: any dynamic template id ("d-" and letters and digits) but
// UnknownTemplateID. The double has no legacy templates.
func knownTemplate(id string) bool {
	rest, ok := strings.CutPrefix(id, "d-")
	if !ok || rest == "" || id == UnknownTemplateID {
		return false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// validBase64 reports whether s is standard, padded base64 on one line, as
// SendGrid wants an attachment's content.
func validBase64(s string) bool {
	if strings.ContainsAny(s, "\r\n \t") {
		return false
	}
	_, err := base64.StdEncoding.Strict().DecodeString(s)
	return err == nil
}

func mergeArgs(top, p map[string]string) map[string]string {
	out := maps.Clone(top)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, p)
	return out
}

func customArgsSize(args map[string]string) int {
	if len(args) == 0 {
		return 0
	}
	b, _ := json.Marshal(args)
	return len(b)
}

// validAddress accepts a bare address ("user@example.com") as SendGrid's
// email fields require: no display name, no angle brackets.
func validAddress(s string) bool {
	if s == "" || len(s) > 320 {
		return false
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" {
		return false
	}
	local, domain, ok := strings.Cut(s, "@")
	return ok && local != "" && domain != "" && len(local) <= 64
}
