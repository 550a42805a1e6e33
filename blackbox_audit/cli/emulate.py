"""``blackbox-audit emulate``: serve a local model behind an OpenAI-compatible emulated API.

For trying the API adapters and the recovery ladder offline against known ground truth: the
emulator (``blackbox_audit.sim.emulator``) plays one provider's exact endpoint semantics
(``--profile``), optionally with seeded faults and logit noise, and (OpenAI-wire profiles) OpenAI's
Files and Fine-tuning APIs, serving each fine-tuned model under its ``ft:...`` name. Serves until
Ctrl-C.
"""

from __future__ import annotations

import argparse

from blackbox_audit.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    from blackbox_audit.cli.options import add_threads_argument
    from blackbox_audit.sim.emulator.backend import READ_ROWS
    from blackbox_audit.sim.emulator.faults import FAULT_KINDS
    from blackbox_audit.sim.emulator.profiles import PROFILES

    p = subparsers.add_parser(
        "emulate",
        description="Serve a white-box model on 127.0.0.1 with one provider's logprob/logit_bias semantics.",
    )
    p.add_argument("--backend", required=True, help="white-box model: hf:PATH, gguf:PATH or smollm2")
    p.add_argument("--profile", default="openai-chat", choices=list(PROFILES), help="endpoint semantics")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default 0 = any free port)")
    p.add_argument("--model", help="model name clients must send (default emu-PROFILE)")
    p.add_argument("--fault-rate", type=float, default=0.0, help="probability of a fault per provider request")
    p.add_argument("--faults", default="429,500,timeout,garbled,truncated", help=f"kinds from {','.join(FAULT_KINDS)}")
    p.add_argument("--retry-after", type=float, default=1.0, help="Retry-After seconds of 429 faults")
    p.add_argument("--fault-timeout", type=float, default=30.0, help="seconds a 'timeout' fault holds the connection")
    p.add_argument("--noise", type=float, default=0.0, help="sigma of Gaussian noise on logits per request")
    p.add_argument("--seed", type=int, default=0, help="seed of faults and noise")
    p.add_argument("--device", help="torch device for the backend (default: best available)")
    add_threads_argument(p)
    p.add_argument(
        "--fine-tune-delay",
        type=float,
        default=0.0,
        help="seconds each fine-tuning job waits in 'queued' (OpenAI-wire profiles serve /v1/files and "
        "/v1/fine_tuning/jobs; default 0)",
    )
    p.add_argument(
        "--batch-delay",
        type=float,
        default=0.0,
        help="seconds each batch waits 'in_progress' before it is answered (OpenAI-wire profiles serve "
        "/v1/batches, the anthropic profile /v1/messages/batches; default 0)",
    )
    p.add_argument("--adapter-cache", help="folder to cache fine-tuned LoRA adapters in (default: train every job)")
    p.add_argument(
        "--read-rows",
        type=int,
        default=READ_ROWS,
        help=f"most concurrent logprob reads in one forward pass, each row's bytes the same alone or batched "
        f"(default {READ_ROWS}); 0: one read per pass at the context's own length, on every torch thread (faster "
        "for one serial client on a multi-core CPU, docs/api.md)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from blackbox_audit.adapters import load_target
    from blackbox_audit.sim.emulator import start_emulator

    if args.backend.split(":", 1)[0] not in ("hf", "gguf", "smollm2"):
        raise UserError(f"--backend '{args.backend}' is not a local model", "use hf:PATH, gguf:PATH or smollm2")
    if args.read_rows < 0:
        raise UserError(f"--read-rows {args.read_rows} is negative", "pass 0 (one read per pass) or a positive count")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port} is not a port number", "pass 0 (any free port) or 1..65535")
    backend = load_target(args.backend, **({"device": args.device} if args.device else {}))
    try:
        emu = start_emulator(
            backend,
            args.profile,
            model=args.model,
            port=args.port,
            fault_rate=args.fault_rate,
            faults=args.faults,
            retry_after_s=args.retry_after,
            timeout_s=args.fault_timeout,
            noise=args.noise,
            seed=args.seed,
            background=False,
            fine_tune_delay_s=args.fine_tune_delay,
            adapter_cache=args.adapter_cache,
            batch_delay_s=args.batch_delay,
            read_rows=args.read_rows,
        )
    except OSError as exc:
        raise UserError(f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror}", "pick another --port or 0") from exc
    print(f"base URL: {emu.base_url}", flush=True)
    print(f"model:    {emu.model}", flush=True)
    print(f"target:   {emu.target_spec}", flush=True)
    print("serving until Ctrl-C", flush=True)
    try:
        emu.serve_forever()
    except KeyboardInterrupt:
        print("stopped", flush=True)
    finally:
        emu.close()
    return 0
