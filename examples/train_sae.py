"""Train SAEs on one cached hook and evaluate them: the workbench.sae API in a few lines.

    python examples/train_sae.py --cache CACHE --out OUT [--model tiny]
    torchrun --standalone --nproc_per_node 2 examples/train_sae.py --cache CACHE --out OUT

Two BatchTopK SAEs, without and with a rank-r scaffold, train on the same stream of batches;
each is saved in SAELens format under OUT/<name> and evaluated into OUT/<name>/metrics.json.
"""

import argparse
import json

import torch.distributed as dist

from workbench.sae import SAEConfig, TrainConfig, evaluate, train


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cache", required=True, help="activation cache folder (workbench cache)")
    p.add_argument("--out", required=True, help="output folder for the run")
    p.add_argument("--hook", default="blocks.2.hook_resid_post")
    p.add_argument("--model", default="tiny", help="model spec for the spliced-model metrics; '' skips them")
    p.add_argument("--k", type=int, default=16)
    p.add_argument("--expansion", type=int, default=4)
    p.add_argument("--scaffold-rank", type=int, default=4)
    p.add_argument("--n-tokens", type=int, default=200_000)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--resume", action="store_true")
    args = p.parse_args()

    configs = [
        SAEConfig("batchtopk", k=args.k, expansion=args.expansion),
        SAEConfig("batchtopk", k=args.k, expansion=args.expansion, scaffold_rank=args.scaffold_rank),
    ]
    train_cfg = TrainConfig(n_tokens=args.n_tokens, batch_size=args.batch_size, lr=args.lr, log_every=10)
    folders = train(args.cache, args.hook, configs, train_cfg, args.out, resume=args.resume)

    if not dist.is_initialized() or dist.get_rank() == 0:
        for folder in folders:
            m = evaluate(folder, args.cache, args.model or None, n_sequences=16)
            r = m["reconstruction"]
            print(
                json.dumps(
                    {
                        "sae": folder.name,
                        "fvu": r["fvu"],
                        "l0": r["l0"],
                        "n_dense": r["n_dense"],
                        "ce_loss_recovered": m.get("splice", {}).get("ce_loss_recovered"),
                    }
                )
            )
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
