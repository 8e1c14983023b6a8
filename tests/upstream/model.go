package main

// The scripted model: enough of Anthropic's Messages API (/v1/messages) and
// OpenAI's Responses API (/v1/responses) for a harness to run one real agent
// loop against the test host. A prompt carrying
//
//	AISB-LOOP path=/project/NAME content=WORD
//
// gets, as the model's first turn, a call of the request's own file-writing
// tool (the first tool whose name is write or Write; codex has none, so
// its shell tool runs printf) with that path and content; once the request
// carries the tool's result, the model ends the turn with the text "done".
// Any other request (a title, a quota probe) gets the text "ok". Nothing here
// is a model: the harness's tool call, its execution in the sandbox and the
// file it leaves in /project are what a test checks.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

var loopPrompt = regexp.MustCompile(`AISB-LOOP path=(/project/[A-Za-z0-9._-]+) content=([A-Za-z0-9._-]+)`)

// loopTask is what the last user turn asks for, if it is a loop prompt.
type loopTask struct {
	path, content string
}

// findTask reads the task from the request body's text, the last match
// winning (a harness may repeat the prompt in its system text).
func findTask(body []byte) (loopTask, bool) {
	m := loopPrompt.FindAllSubmatch(body, -1)
	if len(m) == 0 {
		return loopTask{}, false
	}
	last := m[len(m)-1]
	return loopTask{path: string(last[1]), content: string(last[2])}, true
}

// anthropicRequest is the part of a Messages request the script reads.
type anthropicRequest struct {
	Stream   bool `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name        string `json:"name"`
		InputSchema struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"input_schema"`
	} `json:"tools"`
}

// messages answers /v1/messages.
func messages(w http.ResponseWriter, body []byte) {
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	answered := false
	if n := len(req.Messages); n > 0 {
		answered = strings.Contains(string(req.Messages[n-1].Content), `"tool_result"`)
	}
	task, isLoop := findTask(body)
	var block map[string]any
	stop := "end_turn"
	switch {
	case isLoop && !answered:
		for _, tool := range req.Tools {
			if !strings.EqualFold(tool.Name, "write") {
				continue
			}
			input := map[string]string{}
			for prop := range tool.InputSchema.Properties {
				switch p := strings.ToLower(prop); {
				case strings.Contains(p, "path"):
					input[prop] = task.path
				case strings.Contains(p, "content"):
					input[prop] = task.content + "\n"
				}
			}
			block = map[string]any{"type": "tool_use", "id": "toolu_aisb_loop", "name": tool.Name, "input": input}
			stop = "tool_use"
			break
		}
		if block == nil {
			block = map[string]any{"type": "text", "text": "no write tool offered"}
		}
	case isLoop:
		block = map[string]any{"type": "text", "text": "done"}
	default:
		block = map[string]any{"type": "text", "text": "ok"}
	}
	msg := map[string]any{
		"id": "msg_aisb_loop", "type": "message", "role": "assistant", "model": "aisb-scripted",
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": 1, "output_tokens": 1},
	}
	if !req.Stream {
		msg["content"] = []any{block}
		msg["stop_reason"] = stop
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(msg)
		return
	}
	ev := newEvents(w)
	ev.send("message_start", map[string]any{"type": "message_start", "message": msg})
	if block["type"] == "tool_use" {
		input, _ := json.Marshal(block["input"])
		start := map[string]any{"type": "tool_use", "id": block["id"], "name": block["name"], "input": map[string]any{}}
		ev.send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": start})
		ev.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
	} else {
		ev.send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		ev.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": block["text"]}})
	}
	ev.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	ev.send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]int{"output_tokens": 1}})
	ev.send("message_stop", map[string]any{"type": "message_stop"})
}

// responsesRequest is the part of a Responses request the script reads.
type responsesRequest struct {
	Input []struct {
		Type string `json:"type"`
	} `json:"input"`
	Tools []struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tools"`
}

// responses answers /v1/responses (always streamed: codex asks so).
func responses(w http.ResponseWriter, body []byte) {
	var req responsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	answered := false
	for _, in := range req.Input {
		if in.Type == "function_call_output" || in.Type == "custom_tool_call_output" {
			answered = true
		}
	}
	task, isLoop := findTask(body)
	var item map[string]any
	switch {
	case isLoop && !answered:
		shell := ""
		for _, tool := range req.Tools {
			if tool.Type == "function" && (tool.Name == "shell" || tool.Name == "exec_command" || tool.Name == "shell_command") {
				shell = tool.Name
				break
			}
		}
		if shell == "" {
			item = textItem("no shell tool offered")
			break
		}
		script := fmt.Sprintf("printf '%%s\\n' %s > %s", task.content, task.path)
		var args map[string]any
		switch shell {
		case "shell":
			args = map[string]any{"command": []string{"bash", "-lc", script}}
		default: // exec_command and shell_command take one command line
			args = map[string]any{"command": script, "cmd": script}
		}
		a, _ := json.Marshal(args)
		item = map[string]any{"type": "function_call", "id": "fc_aisb_loop", "call_id": "call_aisb_loop", "name": shell, "arguments": string(a), "status": "completed"}
	case isLoop:
		item = textItem("done")
	default:
		item = textItem("ok")
	}
	resp := map[string]any{"id": "resp_aisb_loop", "object": "response", "status": "in_progress", "model": "aisb-scripted", "output": []any{}}
	ev := newEvents(w)
	ev.send("response.created", map[string]any{"type": "response.created", "response": resp})
	ev.send("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item})
	ev.send("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	resp["status"] = "completed"
	resp["output"] = []any{item}
	resp["usage"] = map[string]any{"input_tokens": 1, "output_tokens": 1, "total_tokens": 2, "input_tokens_details": map[string]int{"cached_tokens": 0}, "output_tokens_details": map[string]int{"reasoning_tokens": 0}}
	ev.send("response.completed", map[string]any{"type": "response.completed", "response": resp})
}

func textItem(text string) map[string]any {
	return map[string]any{"type": "message", "id": "msg_aisb_loop", "role": "assistant", "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}
}

// events writes server-sent events, each flushed as it is written.
type events struct {
	w  http.ResponseWriter
	fl http.Flusher
}

func newEvents(w http.ResponseWriter) *events {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl, _ := w.(http.Flusher)
	return &events{w: w, fl: fl}
}

func (e *events) send(name string, data any) {
	b, _ := json.Marshal(data)
	fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, b)
	if e.fl != nil {
		e.fl.Flush()
	}
}
