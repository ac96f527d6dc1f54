package intenttype

import (
	"crypto/sha256"
	"encoding/base32"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxKeyLength is the longest intent key the outbox stores, in bytes.
const MaxKeyLength = 255

// keyHashLength is the length of the hash that replaces the tail of a key
// that does not fit: "~" and 26 base32 characters (130 bits of SHA-256).
const keyHashLength = 27

// keyEscaper escapes the characters that separate a key's parts (':'), mark
// a hashed key ('~'), and the escape itself ('%'), so that no message id can
// forge another message's key.
var keyEscaper = strings.NewReplacer("%", "%25", ":", "%3A", "~", "%7E")

// MessageKey derives the key of an intent recorded by a consumer for a
// message: "consumer:message" for a message's only intent,
// "consumer:message:name" when the message records several. Consumer and
// intent names cannot contain ':' and the message id is escaped, so two
// different (consumer, message id, name) triples never derive the same key
// ("orders" + "m1" named "receipt" is "orders:m1:receipt"; the single intent
// of message "m1:receipt" is "orders:m1%3Areceipt"). A key longer than
// MaxKeyLength keeps a readable prefix and replaces the rest by a hash of
// the whole (see FitKey).
func MessageKey(consumer, messageID, name string) string {
	k := consumer + ":" + keyEscaper.Replace(messageID)
	if name != "" {
		k += ":" + name
	}
	return FitKey(k, MaxKeyLength)
}

// ProviderKey derives the idempotency key a provider is sent for an intent:
// the deployment's namespace, the key generation and the intent's key,
// "namespace.generation/key", fitted to limit bytes (0: MaxKeyLength). The
// namespace and generation contain no '.' or '/' of their own, so the parts
// are told apart; a new generation is a new key for the same intent.
func ProviderKey(namespace string, generation int, key string, limit int) string {
	if limit <= 0 || limit > MaxKeyLength {
		limit = MaxKeyLength
	}
	return FitKey(namespace+"."+strconv.Itoa(generation)+"/"+key, limit)
}

// FitKey returns k when it is at most limit bytes; otherwise its first
// bytes (cut at a character boundary) followed by "~" and a base32 SHA-256
// of the whole k, at most limit bytes long in all. Keys that fit are never
// changed, and '~' appears in a derived key only as the hash's mark.
func FitKey(k string, limit int) string {
	if len(k) <= limit {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	hash := "~" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:]))[:keyHashLength-1]
	cut := max(limit-keyHashLength, 0)
	for cut > 0 && !utf8.RuneStart(k[cut]) {
		cut--
	}
	return k[:cut] + hash
}
