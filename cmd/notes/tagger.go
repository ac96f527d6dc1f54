package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

const (
	// taggerConsumer is the intents consumer name of the tagger: part of
	// its processed markers and of its email intents' keys.
	taggerConsumer = "tagger"
	// routingKeyNoteCreated is NoteCreated's routing key.
	routingKeyNoteCreated = "note.created"
	// maxTags bounds the tags of one note; maxTagLength, one tag.
	maxTags      = 10
	maxTagLength = 40
)

// noteCreated is the NoteCreated event's body.
type noteCreated struct {
	NoteID      int64  `json:"note_id"`
	Title       string `json:"title"`
	Body        string `json:"body"`
	AuthorEmail string `json:"author_email"`
}

// messageID is the NoteCreated event's id for a note: the publish intent's
// idempotency key, which amqpprovider sends as the AMQP message-id. Every
// copy of the event (a dispatcher retry, an operator's resend, a broker
// redelivery) carries the same one.
func messageID(noteID int64) string { return "note-created:" + strconv.FormatInt(noteID, 10) }

// reference is the business reference on every intent about a note, so an
// operator finds them all (outboxd intents list --reference note-7).
func reference(noteID int64) string { return "note-" + strconv.FormatInt(noteID, 10) }

// errBadEvent is wrapped by the tagger's error for a body it cannot use;
// the consumer retries it a few times, then dead-letters it.
var errBadEvent = errors.New("malformed NoteCreated event")

// tagger is the NoteCreated consumer's handler. It runs inside the inbox
// transaction intents.Consume opened: the processed marker, the tags, the
// note's tagged_at and the email intent commit together or not at all.
func tagger(from string) func(ctx context.Context, d amqp.Delivery, tx pgx.Tx, rec *intents.Recorder) error {
	return func(ctx context.Context, d amqp.Delivery, tx pgx.Tx, rec *intents.Recorder) error {
		var ev noteCreated
		if err := json.Unmarshal(d.Body, &ev); err != nil {
			return fmt.Errorf("%w: %v", errBadEvent, err)
		}
		if ev.NoteID <= 0 || ev.AuthorEmail == "" {
			return fmt.Errorf("%w: note_id and author_email are required", errBadEvent)
		}
		tags := deriveTags(ev.Title + "\n" + ev.Body)
		if _, err := tx.Exec(ctx, insertTagsSQL, ev.NoteID, tags); err != nil {
			return fmt.Errorf("store tags: %w", err)
		}
		tag, err := tx.Exec(ctx, markTaggedSQL, ev.NoteID)
		if err != nil {
			return fmt.Errorf("mark note tagged: %w", err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("%w: note %d does not exist", errBadEvent, ev.NoteID)
		}
		// One intent per message: its key is derived, "tagger:note-created:<id>".
		return rec.Record(intents.Intent{
			Kind:      sendgridprovider.KindEmail,
			Reference: reference(ev.NoteID),
			Payload:   taggedEmail(from, ev, tags),
		})
	}
}

// taggedEmail is the notification to a note's author.
func taggedEmail(from string, ev noteCreated, tags []string) sendgridprovider.Email {
	list := "(no tags found)"
	if len(tags) > 0 {
		list = "#" + strings.Join(tags, ", #")
	}
	return sendgridprovider.Email{
		From:    &sendgridprovider.Address{Email: from, Name: "Notes"},
		To:      []sendgridprovider.Address{{Email: ev.AuthorEmail}},
		Subject: "Your note was tagged: " + list,
		Text: fmt.Sprintf("Your note %q (id %d) was tagged: %s.\n\nThis email is sent once per note, however often NoteCreated is delivered.\n",
			ev.Title, ev.NoteID, list),
		Categories: []string{"note-tagged"},
		CustomArgs: map[string]string{"note_id": strconv.FormatInt(ev.NoteID, 10)},
	}
}

var hashtagPattern = regexp.MustCompile(`#([\p{L}\p{N}_-]+)`)

// keywordTags maps words (lower case) to the tag they imply. Read only.
var keywordTags = map[string]string{
	"meeting": "meeting", "meetings": "meeting", "standup": "meeting",
	"todo": "todo", "to-do": "todo", "remember": "todo",
	"urgent": "urgent", "asap": "urgent",
	"idea": "idea", "ideas": "idea",
	"bug": "bug", "bugs": "bug", "crash": "bug",
	"invoice": "finance", "budget": "finance",
}

// deriveTags returns text's #hashtags and the tags its keywords imply,
// lower case, distinct, sorted, at most maxTags of at most maxTagLength
// bytes each.
func deriveTags(text string) []string {
	seen := map[string]bool{}
	add := func(tag string) {
		tag = strings.Trim(strings.ToLower(tag), "-_")
		if len(tag) > maxTagLength {
			tag = tag[:maxTagLength]
			for !utf8.ValidString(tag) {
				tag = tag[:len(tag)-1]
			}
		}
		if tag != "" {
			seen[tag] = true
		}
	}
	for _, m := range hashtagPattern.FindAllStringSubmatch(text, -1) {
		add(m[1])
	}
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !(r == '-' || r >= 'a' && r <= 'z')
	}) {
		if tag, ok := keywordTags[w]; ok {
			add(tag)
		}
	}
	tags := make([]string, 0, len(seen))
	for t := range seen {
		tags = append(tags, t)
	}
	sort.Strings(tags)
	if len(tags) > maxTags {
		tags = tags[:maxTags]
	}
	return tags
}
