// Command baseline is the ceiling of the comparison benchmark: a minimal
// SQS consumer with the same shape as sqsonce's worker (one poller, or
// -pollers, that asks for no more messages than there are free handler
// slots, one goroutine per message, one deleter, or -deleters, that
// batches whatever is waiting into DeleteMessageBatch) and nothing else: no
// ledger, no keys, no message attributes. Its handler does nothing, or
// waits -work.
//
// With -plain it is the plain poller instead, the stress profile's
// ceiling: each receive loop asks for ten and hands them, as received, to a
// goroutine that deletes them with one DeleteMessageBatch, and receives
// again at once; no handler, no bound on the messages in hand, no ledger.
//
// It stops once -expect deliveries are deleted (or at SIGTERM) and prints
// a benchkit.Report as its last line.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsonce/sqsonce/scripts/bench/internal/benchkit"
)

const maxBatch = 10

type item struct {
	receipt *string
	sent    int64
}

func main() {
	var f benchkit.Flags
	f.Register()
	wait := flag.Int("wait", 20, "long-poll seconds per receive")
	pollerCount := flag.Int("pollers", 1, "receive loops, sharing the handler slots")
	work := flag.Duration("work", 0, "what the handler does: wait this long per message")
	deleters := flag.Int("deleters", 1, "delete loops, each sending one DeleteMessageBatch at a time")
	plain := flag.Bool("plain", false, "the plain poller: receive ten, delete them in one DeleteMessageBatch while receiving again; no handler, no slots (-concurrency, -work and -deleters do not apply)")
	flag.Parse()
	err := f.Check()
	if err == nil && (*pollerCount < 1 || *deleters < 1 || *work < 0) {
		err = fmt.Errorf("-pollers and -deleters must be at least 1, -work not negative")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "baseline:", err)
		os.Exit(2)
	}
	client, reqs := benchkit.NewClient(f.Endpoint)
	rec := benchkit.NewRecorder(f.Expect)
	if *plain {
		runPlain(client, reqs, rec, f.QueueURL, *wait, *pollerCount)
		return
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		select {
		case <-rec.Done():
			stop()
		case <-ctx.Done():
		}
	}()

	slots := make(chan struct{}, f.Concurrency)
	for range f.Concurrency {
		slots <- struct{}{}
	}
	release := func(n int) {
		for range n {
			slots <- struct{}{}
		}
	}
	deletes := make(chan item, 4*maxBatch)
	var deleter, handlers sync.WaitGroup
	for range *deleters {
		deleter.Go(func() { deleteLoop(client, f.QueueURL, deletes, rec) })
	}

	rep := benchkit.Report{Contender: "baseline"}
	var firstReceive atomic.Int64
	var pollers sync.WaitGroup
	for range *pollerCount {
		pollers.Go(func() {
			failures := 0
			for ctx.Err() == nil {
				// Take 1..10 free slots, waiting for the first.
				select {
				case <-slots:
				case <-ctx.Done():
					continue
				}
				n := 1
			more:
				for n < maxBatch {
					select {
					case <-slots:
						n++
					default:
						break more
					}
				}
				firstReceive.CompareAndSwap(0, time.Now().UnixNano())
				out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
					QueueUrl:            &f.QueueURL,
					MaxNumberOfMessages: int32(n),
					WaitTimeSeconds:     int32(*wait),
				})
				if err != nil {
					release(n)
					if ctx.Err() != nil {
						break
					}
					failures++
					fmt.Fprintln(os.Stderr, "baseline: receive:", err)
					time.Sleep(min(time.Duration(failures)*100*time.Millisecond, 2*time.Second))
					continue
				}
				failures = 0
				release(n - len(out.Messages))
				for _, m := range out.Messages {
					handlers.Go(func() {
						defer release(1)
						sent, ok := benchkit.SentMillis(aws.ToString(m.Body))
						if !ok {
							sent = -1
						}
						// The handler: nothing, or -work of waiting.
						if *work > 0 {
							time.Sleep(*work)
						}
						deletes <- item{receipt: m.ReceiptHandle, sent: sent}
					})
				}
			}
		})
	}
	pollers.Wait()
	rep.StartNS = firstReceive.Load()
	handlers.Wait()
	close(deletes)
	deleter.Wait()
	rec.Fill(&rep)
	rep.Requests = reqs.Counts()
	rep.Print()
}

// deleteLoop deletes in batches of up to ten: whatever is waiting when a
// batch starts goes into it.
func deleteLoop(client *sqs.Client, queueURL string, deletes <-chan item, rec *benchkit.Recorder) {
	batch := make([]item, 0, maxBatch)
	entries := make([]types.DeleteMessageBatchRequestEntry, 0, maxBatch)
	sent := make([]int64, 0, maxBatch)
	for it := range deletes {
		batch = append(batch[:0], it)
	gather:
		for len(batch) < maxBatch {
			select {
			case it, ok := <-deletes:
				if !ok {
					break gather
				}
				batch = append(batch, it)
			default:
				break gather
			}
		}
		entries = entries[:0]
		for i, it := range batch {
			entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: it.receipt})
		}
		out, err := client.DeleteMessageBatch(context.Background(), &sqs.DeleteMessageBatchInput{QueueUrl: &queueURL, Entries: entries})
		if err != nil {
			fmt.Fprintln(os.Stderr, "baseline: delete:", err)
			continue
		}
		sent = sent[:0]
		for _, s := range out.Successful {
			i, _ := strconv.Atoi(aws.ToString(s.Id))
			sent = append(sent, batch[i].sent)
		}
		for _, fl := range out.Failed {
			fmt.Fprintln(os.Stderr, "baseline: delete failed:", aws.ToString(fl.Code), aws.ToString(fl.Message))
		}
		if len(sent) > 0 {
			rec.Finish(sent...)
		}
	}
}

// runPlain is the plain poller: pollers receive loops, each receiving ten
// and deleting them with one DeleteMessageBatch in a goroutine of its own
// while it receives the next ten.
func runPlain(client *sqs.Client, reqs *benchkit.Requests, rec *benchkit.Recorder, queueURL string, wait, pollers int) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		select {
		case <-rec.Done():
			stop()
		case <-ctx.Done():
		}
	}()
	rep := benchkit.Report{Contender: "plain"}
	var firstReceive atomic.Int64
	var loops, deletes sync.WaitGroup
	for range pollers {
		loops.Go(func() {
			failures := 0
			for ctx.Err() == nil {
				firstReceive.CompareAndSwap(0, time.Now().UnixNano())
				out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
					QueueUrl:            &queueURL,
					MaxNumberOfMessages: maxBatch,
					WaitTimeSeconds:     int32(wait),
				})
				if err != nil {
					if ctx.Err() != nil {
						break
					}
					failures++
					fmt.Fprintln(os.Stderr, "plain: receive:", err)
					time.Sleep(min(time.Duration(failures)*100*time.Millisecond, 2*time.Second))
					continue
				}
				failures = 0
				if len(out.Messages) == 0 {
					continue
				}
				deletes.Go(func() { deleteAll(client, queueURL, out.Messages, rec) })
			}
		})
	}
	loops.Wait()
	rep.StartNS = firstReceive.Load()
	deletes.Wait()
	rec.Fill(&rep)
	rep.Requests = reqs.Counts()
	rep.Print()
}

// deleteAll deletes one receive's messages with one DeleteMessageBatch.
func deleteAll(client *sqs.Client, queueURL string, msgs []types.Message, rec *benchkit.Recorder) {
	entries := make([]types.DeleteMessageBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
	}
	out, err := client.DeleteMessageBatch(context.Background(), &sqs.DeleteMessageBatchInput{QueueUrl: &queueURL, Entries: entries})
	if err != nil {
		fmt.Fprintln(os.Stderr, "plain: delete:", err)
		return
	}
	sent := make([]int64, 0, len(out.Successful))
	for _, s := range out.Successful {
		i, _ := strconv.Atoi(aws.ToString(s.Id))
		v, ok := benchkit.SentMillis(aws.ToString(msgs[i].Body))
		if !ok {
			v = -1
		}
		sent = append(sent, v)
	}
	for _, fl := range out.Failed {
		fmt.Fprintln(os.Stderr, "plain: delete failed:", aws.ToString(fl.Code), aws.ToString(fl.Message))
	}
	if len(sent) > 0 {
		rec.Finish(sent...)
	}
}
