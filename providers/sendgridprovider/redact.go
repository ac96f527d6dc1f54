package sendgridprovider

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// unparseable is what Redact returns for a payload it cannot read.
var unparseable = json.RawMessage(`{"redacted":"unparseable payload"}`)

// sensitiveArgWords mark custom_args keys whose values Redact masks.
var sensitiveArgWords = []string{
	"secret", "token", "pass", "pwd", "auth", "key", "credential",
	"session", "cookie", "ssn", "card", "cvv", "cvc", "iban", "account",
	"email", "phone", "mobile", "address", "name", "birth", "dob",
}

func redactEmail(payload json.RawMessage) json.RawMessage {
	var e Email
	if err := json.Unmarshal(payload, &e); err != nil {
		return unparseable
	}
	maskList := func(list []Address) []Address {
		out := make([]Address, len(list))
		for i, a := range list {
			out[i] = maskAddress(a)
		}
		return out
	}
	e.To, e.Cc, e.Bcc = maskList(e.To), maskList(e.Cc), maskList(e.Bcc)
	for i, p := range e.Personalizations {
		e.Personalizations[i] = Personalization{To: maskList(p.To), Cc: maskList(p.Cc), Bcc: maskList(p.Bcc), DynamicTemplateData: redactData(p.DynamicTemplateData)}
	}
	e.DynamicTemplateData = redactData(e.DynamicTemplateData)
	for i, a := range e.Attachments {
		// The file is the email's content: only its size is shown.
		a.Content = fmt.Sprintf("[redacted %d bytes]", attachmentSize(a.Content))
		e.Attachments[i] = a
	}
	if e.ReplyTo != nil {
		a := maskAddress(*e.ReplyTo)
		e.ReplyTo = &a
	}
	if e.Text != "" {
		e.Text = fmt.Sprintf("[redacted %d bytes]", len(e.Text))
	}
	if e.HTML != "" {
		e.HTML = fmt.Sprintf("[redacted %d bytes]", len(e.HTML))
	}
	if len(e.CustomArgs) > 0 {
		args := make(map[string]string, len(e.CustomArgs))
		for k, v := range e.CustomArgs {
			if sensitiveArgKey(k) {
				v = "[redacted]"
			}
			args[k] = v
		}
		e.CustomArgs = args
	}
	out, err := json.Marshal(e)
	if err != nil {
		return unparseable
	}
	return out
}

// redactData keeps a dynamic template data's keys (the template's variable
// names) and replaces each value, possibly personal (a name, an address, an
// order's lines), by its size, as the bodies are.
func redactData(data map[string]json.RawMessage) map[string]json.RawMessage {
	if len(data) == 0 {
		return data
	}
	out := make(map[string]json.RawMessage, len(data))
	for k, v := range data {
		out[k], _ = json.Marshal(fmt.Sprintf("[redacted %d bytes]", len(v)))
	}
	return out
}

// attachmentSize is the size of the file a base64 attachment content holds
// (its encoded length when it does not decode).
func attachmentSize(content string) int {
	if b, err := decodeBase64(content); err == nil {
		return len(b)
	}
	return len(content)
}

// maskAddress keeps an address's first character and domain
// ("j***@example.com") and a name's first character ("J***").
func maskAddress(a Address) Address {
	return Address{Email: MaskEmail(a.Email), Name: maskWord(a.Name)}
}

// MaskEmail masks an email address for display, keeping the first character
// of the local part and the domain: "jane@example.com" becomes
// "j***@example.com". A string without "@" becomes "***".
func MaskEmail(s string) string {
	if s == "" {
		return ""
	}
	i := strings.LastIndexByte(s, '@')
	if i < 0 {
		return "***"
	}
	return maskWord(s[:i]) + s[i:]
}

func maskWord(s string) string {
	if s == "" {
		return ""
	}
	r, _ := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError {
		return "***"
	}
	return string(r) + "***"
}

func sensitiveArgKey(k string) bool {
	k = strings.ToLower(k)
	for _, w := range sensitiveArgWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}
