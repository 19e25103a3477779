package handler_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// A stream whose view type carries no old image (KEYS_ONLY, NEW_IMAGE) cannot show
// whether a TTL-deleted row was held: the janitor must not acknowledge such a record as
// "not an abandoned lease" but report it by sequence number, so that Lambda retries it
// and then hands it to the on-failure destination (a misconfigured stream is loud).
func TestTTLRecordWithoutOldImageIsReported(t *testing.T) {
	f := newFixture(t)
	for _, view := range []string{"KEYS_ONLY", "NEW_IMAGE"} {
		var ev events.DynamoDBEvent
		if err := json.Unmarshal(streamEvent(t, "dynamodb-ttl-remove.json"), &ev); err != nil {
			t.Fatal(err)
		}
		ev.Records[0].Change.OldImage = nil
		ev.Records[0].Change.StreamViewType = view
		raw, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if failed := f.handle(t, raw); !slices.Equal(failed, []string{ev.Records[0].Change.SequenceNumber}) {
			t.Errorf("%s: failures = %v, want the record's sequence number", view, failed)
		}
	}
	if ids := f.redrive.ids(); len(ids) != 0 {
		t.Errorf("re-driven %v", ids)
	}
}
