"""Generates a corpus of realistic PyTorch files: model definitions, training scripts and
utilities, with a few device bugs sprinkled in. Deterministic for a given seed, so nothing
foreign is committed and anyone can rebuild the same corpus."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

_LAYERS = [
    "nn.Linear({a}, {b})", "nn.Conv2d({a}, {b}, kernel_size=3, padding=1)", "nn.BatchNorm2d({b})",
    "nn.LayerNorm({b})", "nn.Dropout(p=0.1)", "nn.GELU()", "nn.ReLU(inplace=True)",
    "nn.Embedding({a}, {b})", "nn.GRU({a}, {b}, batch_first=True)",
]

_FORWARD_LINES = [
    "x = self.{layer}(x)",
    "x = F.relu(x)",
    "x = x.view(x.size(0), -1) if x.dim() > 2 else x",
    "residual = x",
    "x = x + residual",
    "mask = torch.ones(x.size(0), x.size(-1), device=x.device)",
    "x = x * mask",
    "scale = torch.arange(x.size(-1), device=x.device).float()",
    "x = x / (1.0 + scale)",
    "x = torch.clamp(x, min=-10.0, max=10.0)",
]

_BUGGY_FORWARD_LINES = [
    "noise = torch.randn(x.size(0), x.size(-1))",
    "h0 = torch.zeros(1, x.size(0), x.size(-1))",
]


def model_file(rng: random.Random, index: int, size: int) -> str:
    lines = [
        f'"""Model family {index}: generated for benchmarks."""',
        "import math",
        "import torch",
        "import torch.nn as nn",
        "import torch.nn.functional as F",
        "",
    ]
    for block in range(max(1, size // 40)):
        name = f"Block{index}_{block}"
        widths = [rng.choice([16, 32, 64, 128]) for _ in range(6)]
        layers = [rng.choice(_LAYERS).format(a=widths[i], b=widths[i + 1]) for i in range(5)]
        lines += [
            f"class {name}(nn.Module):",
            f'    """A stack of {len(layers)} layers."""',
            "",
            "    def __init__(self, hidden: int = 64, dropout: float = 0.1) -> None:",
            "        super().__init__()",
        ]
        lines += [f"        self.layer{i} = {layer}" for i, layer in enumerate(layers)]
        lines += [
            "        self.register_buffer('scale', torch.ones(hidden))",
            "        self.reset_parameters()",
            "",
            "    def reset_parameters(self) -> None:",
            "        for module in self.modules():",
            "            if isinstance(module, nn.Linear):",
            "                nn.init.xavier_uniform_(module.weight)",
            "",
            "    def forward(self, x: torch.Tensor) -> torch.Tensor:",
        ]
        for _ in range(rng.randint(6, 14)):
            template = rng.choice(_FORWARD_LINES)
            lines.append("        " + template.format(layer=f"layer{rng.randrange(len(layers))}"))
        if rng.random() < 0.05:
            lines.append("        " + rng.choice(_BUGGY_FORWARD_LINES))
        lines += ["        return x", "", ""]
    return "\n".join(lines) + "\n"


def training_script(rng: random.Random, index: int, size: int) -> str:
    lines = [
        f'"""Training script {index}: generated for benchmarks."""',
        "import argparse",
        "import os",
        "import torch",
        "import torch.nn as nn",
        "from torch.utils.data import DataLoader, TensorDataset",
        "",
        "",
        "def build_loader(n: int, batch_size: int) -> DataLoader:",
        "    data = TensorDataset(torch.randn(n, 32), torch.randint(0, 10, (n,)))",
        "    return DataLoader(data, batch_size=batch_size, shuffle=True, num_workers=2, pin_memory=True)",
        "",
    ]
    for step in range(max(1, size // 45)):
        lines += [
            "",
            f"def train_epoch_{step}(model, loader, optimizer, criterion, device):",
            "    model.train()",
            "    total = 0.0",
            "    for inputs, targets in loader:",
            "        inputs = inputs.to(device, non_blocking=True)",
            "        targets = targets.to(device, non_blocking=True)",
            "        optimizer.zero_grad(set_to_none=True)",
            "        outputs = model(inputs)",
            "        loss = criterion(outputs, targets)",
            "        loss.backward()",
            "        optimizer.step()",
            "        total += loss.item()",
        ]
        if rng.random() < 0.05:
            lines.append("        inputs.to(device)")
        lines += [
            "    return total / max(1, len(loader))",
            "",
            "",
            f"def evaluate_{step}(model, loader, device):",
            "    model.eval()",
            "    correct = 0",
            "    with torch.no_grad():",
            "        for inputs, targets in loader:",
            "            inputs, targets = inputs.to(device), targets.to(device)",
            "            predictions = model(inputs).argmax(dim=1)",
            "            correct += (predictions == targets).sum().item()",
            "    return correct / max(1, len(loader.dataset))",
        ]
    lines += [
        "",
        "",
        "def main() -> None:",
        "    parser = argparse.ArgumentParser()",
        "    parser.add_argument('--epochs', type=int, default=2)",
        "    parser.add_argument('--resume', default='')",
        "    args = parser.parse_args()",
        "    device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')",
        "    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)",
        "    if torch.cuda.device_count() > 1:",
        "        model = nn.DataParallel(model)",
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
        "    criterion = nn.CrossEntropyLoss()",
        "    if args.resume:",
        "        state = torch.load(args.resume, map_location=device)",
        "        model.load_state_dict(state['model'])",
        "    loader = build_loader(256, 32)",
        "    for epoch in range(args.epochs):",
        "        loss = train_epoch_0(model, loader, optimizer, criterion, device)",
        "        print(f'epoch {epoch}: {loss:.3f}')",
        "    raw = model.module if hasattr(model, 'module') else model",
        "    torch.save({'model': raw.state_dict(), 'epoch': args.epochs}, 'checkpoint.pt')",
        "",
        "",
        "if __name__ == '__main__':",
        "    main()",
    ]
    return "\n".join(lines) + "\n"


def utility_file(rng: random.Random, index: int, size: int) -> str:
    lines = [f'"""Utilities {index}: no torch here."""', "import json", "import os", "import re", ""]
    for number in range(max(1, size // 12)):
        lines += [
            "",
            f"def helper_{number}(path: str, pattern: str = r'\\\\d+') -> list[int]:",
            "    if not os.path.exists(path):",
            "        return []",
            "    with open(path) as handle:",
            "        text = handle.read()",
            f"    values = [int(m) * {rng.randint(1, 9)} for m in re.findall(pattern, text)]",
            "    return sorted(values)",
            "",
            f"CONFIG_{number} = json.loads('{{\"name\": \"run{number}\", \"seed\": {rng.randint(0, 999)}}}')",
        ]
    return "\n".join(lines) + "\n"


def build(folder: Path, files: int, lines: int, seed: int) -> Path:
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    makers = [(model_file, 0.5), (training_script, 0.3), (utility_file, 0.2)]
    for index in range(files):
        maker = rng.choices([m for m, _ in makers], weights=[w for _, w in makers])[0]
        size = max(20, int(rng.gauss(lines, lines / 3)))
        package = folder / f"package_{index % 20:02d}"
        package.mkdir(exist_ok=True)
        (package / f"{maker.__name__}_{index:04d}.py").write_text(maker(rng, index, size))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--files", type=int, default=600)
    parser.add_argument("--lines", type=int, default=220, help="mean lines per file")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    build(args.folder, args.files, args.lines, args.seed)


if __name__ == "__main__":
    main()
