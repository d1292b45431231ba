// Package replay moves messages from a dead-letter queue back to a queue, so
// that the worker consuming that queue runs their operations again.
//
// A Replayer receives messages from the source queue (Config.From), decides
// each by its operation key and the ledger, sends a copy of each message it
// moves to the target queue (Config.To), and deletes the message from the
// source only after SQS accepted the copy. Delivery stays at least once: if
// the delete fails, or the process dies between the send and the delete,
// the message is in both queues, and the ledger answers the second delivery
// as a duplicate.
//
// # What moves
//
// The ledger record of the message's operation key decides:
//
//	complete     left in the source: the work was done (Config.DropComplete deletes it)
//	failed       reset, permanent or not, so that the worker takes it again; moved
//	in_progress  moved: the worker waits for the running claim's lease
//	absent       moved
//
// A message whose payload differs from the one its key was claimed with (a
// conflict) is left, whatever the ledger says: it is another operation
// under the same key (Summary.SkippedConflict). Messages without an
// operation key are left unless Config.IncludeKeyless.
// Config.KeyGlob, Since and Until leave messages outside them, and
// Config.MaxReplays leaves a message replayed that often already.
//
// # The copy
//
// A copy keeps the body and the message attributes of the message it
// copies, and the numeric attribute SqsonceReplays (AttrReplays) counts its
// replays. A copy to a FIFO target also carries, in the attribute
// SqsonceDeduplicationId (worker.AttrDeduplicationID), the deduplication id
// of the message it stands for, since it gets one of its own (below): a key
// taken from the deduplication id stays the same. SQS allows ten message
// attributes per message: to make room for these, SqsonceReason is dropped
// first, then SqsonceSourceMessageId. A message without room for them is
// not moved (Summary.NoRoom): sent without its count, every copy that came
// back to the dead-letter queue would look new, and MaxReplays could never
// stop it from going round for ever. It is left in the source for someone
// to move by hand.
//
// # FIFO targets
//
// On a FIFO target a copy keeps the message group of the message it copies
// (a message from a standard queue gets the group of its operation key, or
// one of its own when it has no key), so that one group's messages arrive in
// their order. Its MessageDeduplicationId identifies the message copied,
// never the operation: it is worker.CopyDeduplicationID of the source
// message's MessageId. SQS drops, for five minutes, every send whose
// deduplication id it has seen on that queue, and answers it with success
// all the same. Named by the operation, the second of two dead letters of
// one key (two conflicting payloads, or a second failure soon after a
// replay) would be dropped and then deleted from the source: lost. Named by
// the message copied, a copy is dropped only when an earlier copy of the
// same message was accepted (an earlier delete from the source failed, or
// the answer to the send was lost), and that copy is in the target:
// deleting the message from the source loses nothing. A message can
// therefore be replayed however soon after it was sent.
//
// # Holding
//
// Messages left in the source are held invisible for the rest of the run
// (Config.Hold), so that none is received and decided twice, and are made
// visible again when Run ends. On a FIFO source such a message holds back
// the rest of its message group until then. A message whose Hold runs out
// during the run comes back; it is recognised and not counted again.
//
// Messages outside the filters (KeyGlob, Since and Until, ReasonGroup,
// State) are not the run's: each is made visible again within
// FilteredHold after the run read it, and every time it reads it again,
// so that other readers (a console, another replay) see them while the
// run goes on.
//
// # Stopping
//
// Run ends when the source runs dry or Config.Max messages moved. Stop ends
// it early and gracefully: no more receives, the moves in hand finish, every
// other message is made visible again. Cancelling Run's context stops at
// once: calls in flight are abandoned (a delete that follows an accepted
// send still goes out), and messages in hand come back after Hold.
package replay
