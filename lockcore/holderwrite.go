package lockcore

import (
	"context"
	"fmt"
)

// holderWrite is the retry policy of a holder's conditional write on its lock row or
// item (a renewal, a release; an UpdateItem, or the Queue's DeleteItem): send, rebuilt
// per attempt, is sent until it succeeds (done gets the answer) or DynamoDB refuses it.
// Only a write that certainly succeeded counts, so a throttled or ambiguous attempt is
// sent again; uncertain, passed to refused, says whether an earlier attempt may have
// landed (an ambiguous one). Refused, the row comes from the refusal, or from reread
// (nil: none) when the refusal did not return it; refused says whether to send again
// (the other variant of the write fits) or returns the outcome. fatal (nil: none) is told
// a refusal that sending again unchanged cannot cure (an item too large, say): it says
// whether to send again (a smaller variant fits) or returns the error to report; else
// the refusal is reported. op and key name the write in errors.
func holderWrite[O any](ctx context.Context, cfg *config, op, key string,
	send func(context.Context) (O, error),
	done func(O) error,
	reread func(context.Context) (item, error),
	refused func(ctx context.Context, old item, uncertain bool) (again bool, err error),
	fatal func(err error) (again bool, ferr error)) error {
	bo := backoff{base: cfg.backoffBase, cap: cfg.backoffCap}
	uncertain := false
	for {
		out, err := send(ctx)
		if err == nil {
			return done(out)
		}
		switch classify(err) {
		case errCondition:
			old, ok := conditionOld(err)
			if !ok && reread != nil {
				var rerr error
				if old, rerr = reread(ctx); rerr != nil {
					return fmt.Errorf("lockcore: %s %q: condition failed and re-read failed: %w", op, key, rerr)
				}
			}
			again, err := refused(ctx, old, uncertain)
			if !again {
				return err
			}
			continue
		case errFatal:
			if fatal != nil {
				again, ferr := fatal(err)
				if ferr != nil {
					return ferr
				}
				if again {
					continue
				}
			}
			return fmt.Errorf("lockcore: %s %q: %w", op, key, err)
		case errAmbiguous:
			uncertain = true
		}
		if serr := sleep(ctx, bo.next()); serr != nil {
			return fmt.Errorf("lockcore: %s %q: %w (last error: %v)", op, key, serr, err)
		}
	}
}
