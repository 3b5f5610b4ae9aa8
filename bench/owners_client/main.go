// The owners' load for `python -m bench owners` (bench/owners.py): a lean SQS client, so that the clients are not
// what bounds the run. Raw HTTP, SQS's JSON protocol, no signing (the servers run without auth on loopback), the
// standard library only.
//
// Owners first..first+count-1 each long-poll their own queue (PREFIX-i) in a loop: ReceiveMessage with
// WaitTimeSeconds 20, then DeleteMessage for what came. Their first polls are spread over one wait, so the polls'
// ends are spread too. With -rate, this process is also the producer: it sends that many messages a second to random
// owners of all (-owners), each body "ID UNIX_NANOS", and the receiving client times send -> receive from the body.
//
// Phases, driven by the harness over stdin/stdout: the client prints one JSON line at the end of each phase (its
// counters so far) and waits for a line on stdin before it starts the next: created, parked, warm, idle, live, done.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var (
	base    = flag.String("url", "", "the server's URL")
	prefix  = flag.String("prefix", "owner", "queue names: PREFIX-i")
	run     = flag.String("run", "r", "this run's tag, in every body: a message an earlier run left is deleted, not counted")
	owners  = flag.Int("owners", 500, "owners in all (the producer picks among them)")
	first   = flag.Int("first", 0, "the first owner this process polls for")
	count   = flag.Int("count", -1, "how many owners this process polls for (-1: all)")
	create  = flag.Bool("create", false, "create this process's queues first")
	rate    = flag.Float64("rate", 0, "messages a second this process sends to random owners (0: not the producer)")
	startS  = flag.Float64("start", 60, "seconds over which the owners come online (their first polls)")
	warmS   = flag.Float64("warm", 60, "seconds the owners poll with nothing sent before the idle window")
	idleS   = flag.Float64("idle", 20, "seconds the owners stay parked with nothing sent")
	liveS   = flag.Float64("live", 30, "seconds the producer sends")
	drainS  = flag.Float64("drain", 10, "seconds to wait for the last messages after the sends")
	waitS   = flag.Int("wait", 20, "WaitTimeSeconds of every poll")
	account = "000000000000"
)

type counters struct {
	Polls, Empty, Errors, Sent, SendErrors, Received, Deleted, Stale int64
}

var (
	c        counters
	client   *http.Client
	mu       sync.Mutex
	received [][2]int64 // (message id, send -> receive in µs)
	sentIDs  []int64
	stdin    = bufio.NewScanner(os.Stdin)
	stopping atomic.Bool
	kinds    = map[string]int64{} // errors by kind (under mu)
)

// failed counts an error by its kind: the first words of its message, without addresses.
func failed(err error) {
	atomic.AddInt64(&c.Errors, 1)
	kind := err.Error()
	for _, k := range []string{"timeout", "refused", "reset", "EOF", "too many open files", "HTTP 5", "HTTP 4"} {
		if strings.Contains(kind, k) {
			kind = k
			break
		}
	}
	if len(kind) > 60 {
		kind = kind[:60]
	}
	mu.Lock()
	kinds[kind]++
	mu.Unlock()
}

func call(action string, params map[string]any) (map[string]any, error) {
	body, _ := json.Marshal(params)
	req, _ := http.NewRequest("POST", *base+"/", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Target", "AmazonSQS."+action)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s: HTTP %d: %.200s", action, resp.StatusCode, data)
	}
	out := map[string]any{}
	if len(data) > 0 {
		if err := json.Unmarshal(data, &out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func queueURL(i int) string { return fmt.Sprintf("%s/%s/%s-%d", *base, account, *prefix, i) }

func owner(i int) {
	q := queueURL(i)
	for !stopping.Load() {
		r, err := call("ReceiveMessage", map[string]any{
			"QueueUrl": q, "WaitTimeSeconds": *waitS, "MaxNumberOfMessages": 10, "VisibilityTimeout": 60,
		})
		now := time.Now().UnixNano()
		if stopping.Load() {
			return
		}
		if err != nil {
			failed(err)
			time.Sleep(time.Second)
			continue
		}
		atomic.AddInt64(&c.Polls, 1)
		msgs, _ := r["Messages"].([]any)
		if len(msgs) == 0 {
			atomic.AddInt64(&c.Empty, 1)
			continue
		}
		for _, m := range msgs {
			mm := m.(map[string]any)
			parts := strings.Fields(mm["Body"].(string))
			if len(parts) == 3 && parts[0] == *run {
				id, _ := strconv.ParseInt(parts[1], 10, 64)
				at, _ := strconv.ParseInt(parts[2], 10, 64)
				mu.Lock()
				received = append(received, [2]int64{id, (now - at) / 1000})
				mu.Unlock()
				atomic.AddInt64(&c.Received, 1)
			} else {
				atomic.AddInt64(&c.Stale, 1) // an earlier run's: deleted, not timed
			}
			if _, err := call("DeleteMessage", map[string]any{"QueueUrl": q, "ReceiptHandle": mm["ReceiptHandle"]}); err != nil {
				failed(err)
			} else {
				atomic.AddInt64(&c.Deleted, 1)
			}
		}
	}
}

func produce(seconds float64) {
	var wg sync.WaitGroup
	every := time.Duration(float64(time.Second) / *rate)
	end := time.Now().Add(time.Duration(seconds * float64(time.Second)))
	next := time.Now()
	for id := int64(0); time.Now().Before(end); id++ {
		time.Sleep(time.Until(next))
		next = next.Add(every)
		wg.Add(1)
		go func(id int64) {
			defer wg.Done()
			body := fmt.Sprintf("%s %d %d", *run, id, time.Now().UnixNano())
			_, err := call("SendMessage", map[string]any{"QueueUrl": queueURL(rand.Intn(*owners)), "MessageBody": body})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				c.SendErrors++
				return
			}
			c.Sent++
			sentIDs = append(sentIDs, id)
		}(id)
	}
	wg.Wait()
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// report ends a phase: the counters so far, then it waits for the harness's go-ahead (a line on stdin).
func report(phase string, extra map[string]any) {
	out := map[string]any{
		"phase": phase, "polls": atomic.LoadInt64(&c.Polls), "empty": atomic.LoadInt64(&c.Empty),
		"errors": atomic.LoadInt64(&c.Errors), "received": atomic.LoadInt64(&c.Received), "cpu_s": cpuSeconds(),
		"stale": atomic.LoadInt64(&c.Stale),
	}
	mu.Lock()
	out["sent"], out["send_errors"] = c.Sent, c.SendErrors
	errorKinds := map[string]int64{}
	for k, v := range kinds {
		errorKinds[k] = v
	}
	out["error_kinds"] = errorKinds
	mu.Unlock()
	for k, v := range extra {
		out[k] = v
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
	if phase != "done" && !stdin.Scan() {
		os.Exit(0) // the harness went away
	}
}

func main() {
	flag.Parse()
	if *count < 0 {
		*count = *owners - *first
	}
	var rl syscall.Rlimit // as many sockets as the hard limit allows: one per owner's poll
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil {
		rl.Cur = rl.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	client = &http.Client{
		Timeout: time.Duration(*waitS+20) * time.Second,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			MaxIdleConns:        *count + 1000,
			MaxIdleConnsPerHost: *count + 1000,
			IdleConnTimeout:     60 * time.Second,
			DisableCompression:  true,
		},
	}
	if *create {
		work := make(chan int)
		var wg sync.WaitGroup
		for w := 0; w < 32; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					for try := 0; ; try++ {
						if _, err := call("CreateQueue", map[string]any{"QueueName": fmt.Sprintf("%s-%d", *prefix, i)}); err == nil || try == 4 {
							if err != nil {
								atomic.AddInt64(&c.Errors, 1)
							}
							break
						}
						time.Sleep(time.Second)
					}
				}
			}()
		}
		t0 := time.Now()
		for i := *first; i < *first+*count; i++ {
			work <- i
		}
		close(work)
		wg.Wait()
		report("created", map[string]any{"create_s": time.Since(t0).Seconds()})
	} else {
		report("created", nil)
	}
	spread := time.Duration(*startS*float64(time.Second)) / time.Duration(max(*count, 1))
	for i := *first; i < *first+*count; i++ {
		go owner(i)
		time.Sleep(spread)
	}
	time.Sleep(2 * time.Second) // the last ones' first looks
	report("parked", nil)
	time.Sleep(time.Duration(*warmS * float64(time.Second)))
	report("warm", nil)
	time.Sleep(time.Duration(*idleS * float64(time.Second)))
	report("idle", nil)
	if *rate > 0 {
		produce(*liveS)
	} else {
		time.Sleep(time.Duration(*liveS * float64(time.Second)))
	}
	report("live", nil)
	time.Sleep(time.Duration(*drainS * float64(time.Second)))
	stopping.Store(true)
	mu.Lock()
	got, sent := received, sentIDs
	mu.Unlock()
	report("done", map[string]any{"latencies": got, "sent_ids": sent})
}
