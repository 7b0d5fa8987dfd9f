//! How a task's progress reads on a terminal: one set of lines for `browserd run` (from the
//! agent's events in-process) and `browserd tasks watch` (from a server's event stream), so both
//! print the same thing for the same step. Everything goes to stderr; stdout is kept for the
//! final result.

use browserd_agent::{ActionCall, ActionResult, AgentOutput, StepMetadata};

/// `text` on one line (whitespace runs collapsed), cut at `max` characters with an ellipsis.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

/// `▶ task: …`, the first line.
pub fn task(task: &str) {
    eprintln!("▶ task: {}", one_line(task, 300));
}

/// A step began (`elapsed` seconds since the task started; step 0 is the initial navigation).
pub fn step_started(elapsed: f64, step: u32, url: &str) {
    if step == 0 {
        eprintln!("\n[{elapsed:7.1}s] step 0 (initial navigation)");
    } else {
        eprintln!("\n[{elapsed:7.1}s] step {step}  {}", one_line(url, 120));
    }
}

/// The model's evaluation of the previous goal and its next goal.
pub fn model_output(output: &AgentOutput) {
    if let Some(eval) = &output.evaluation_previous_goal {
        eprintln!("  eval:      {}", one_line(eval, 200));
    }
    if let Some(goal) = &output.next_goal {
        eprintln!("  next goal: {}", one_line(goal, 200));
    }
}

/// One action and what it did.
pub fn action_result(action: &ActionCall, result: &ActionResult) {
    let params = one_line(&action.params.to_string(), 160);
    let outcome = match (
        &result.error,
        &result.long_term_memory,
        &result.extracted_content,
    ) {
        (Some(error), _, _) => format!("✗ {}", one_line(error, 200)),
        (None, Some(memory), _) => format!("✓ {}", one_line(memory, 200)),
        (None, None, Some(content)) => format!("✓ {}", one_line(content, 200)),
        (None, None, None) => "✓".to_owned(),
    };
    eprintln!("  {} {params} → {outcome}", action.name);
}

/// A step's record is final: its duration and where the time went.
pub fn step_finished(metadata: &StepMetadata) {
    let took = (metadata.step_end_time - metadata.step_start_time).max(0.0);
    eprintln!(
        "  step {} took {took:.1}s (capture {} ms, model {} ms, actions {} ms)",
        metadata.step_number, metadata.capture_ms, metadata.model_ms, metadata.actions_ms
    );
}

/// The run paused between steps.
pub fn paused(elapsed: f64) {
    eprintln!("[{elapsed:7.1}s] paused");
}

/// The run resumed.
pub fn resumed(elapsed: f64) {
    eprintln!("[{elapsed:7.1}s] resumed");
}

/// The run ended, with the error that ended it if any.
pub fn ended(elapsed: f64, error: Option<&str>) {
    match error {
        Some(error) => eprintln!("\n[{elapsed:7.1}s] ended: {}", one_line(error, 300)),
        None => eprintln!("\n[{elapsed:7.1}s] finished"),
    }
}
