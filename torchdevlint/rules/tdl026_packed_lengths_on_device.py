"""TDL026 packed-lengths-on-device."""

from __future__ import annotations

import libcst as cst

from torchdevlint.analysis.brains import torch_api
from torchdevlint.analysis.local_names import rebound_parameters
from torchdevlint.diagnostics import Applicability
from torchdevlint.edits import NodeEdit
from torchdevlint.rule import Invalid, Rule, Valid
from torchdevlint.runtime_proof import PACKED_LENGTHS_ON_DEVICE, RuntimeProof

# Expressions that take `.cpu()` without parentheses.
_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)


class PackedLengthsOnDevice(Rule):
    """
    ## What it does
    Finds the lengths given to `torch.nn.utils.rnn.pack_padded_sequence` where the flow model
    shows them to be a tensor on an accelerator on every path: counted from the padded batch inside
    `forward` (`(tokens != pad).sum(1)`), moved with the rest of the batch, read from a batch
    of a torchtext iterator made with `device=` (`text, text_lengths = batch.text` with
    `include_lengths=True`), or handed to a model of the file whose `forward` passes them on to
    `pack_padded_sequence` as they are, itself or through a part the file built it with
    (`GreedySearchDecoder(encoder, decoder)` handing them on to the encoder).

    ## Why is this bad?
    Since PyTorch 1.7 the lengths of a packed sequence must be a CPU tensor: on a GPU the call
    fails with "'lengths' argument should be a 1D CPU int64 tensor, but got 1D cuda:0 Long
    tensor". The batch itself belongs on the GPU, so moving everything the loader yields, or
    counting the lengths from the padded tokens, puts them there too. On a CPU-only machine the
    program runs, so the bug ships; older tutorials that passed device lengths stopped working
    when PyTorch began to check.

    ## Not reported
    Not reported: lengths on the host (a list, `lengths.cpu()`, a tensor never moved), lengths
    of unknown place, lengths handed to a model whose `forward` moves them to the CPU itself
    (`lengths.cpu()`, `lengths.to("cpu")`) before packing, a function's own parameter
    handed on as it is (its callers are reported where they pass device data; a function that
    moves its parameter itself, `lengths = lengths.to(device)`, is reported), and what a
    model returned: a decoder's `decode_lengths` is often a Python list.

    ## Fix safety
    Safe. The fix appends `.cpu()` to the lengths where they are handed over. The operation
    needs them on the host on every device, and on the host `.cpu()` returns the same tensor;
    the other uses of the lengths keep their device.

    ## Options
    None.
    """

    code = "TDL026"
    slug = "packed-lengths-on-device"
    message = "pack_padded_sequence needs its lengths on the CPU; these are on the device"
    fix_title = "Hand the lengths over on the CPU"
    requires_any_text = ("pack_padded_sequence",)
    proof = RuntimeProof(PACKED_LENGTHS_ON_DEVICE)

    VALID = [
        Valid(
            """
            import torch
            import torch.nn as nn
            from torch.nn.utils.rnn import pack_padded_sequence

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            class Encoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embed = nn.Embedding(100, 16)
                    self.rnn = nn.GRU(16, 32, batch_first=True)

                def forward(self, tokens, lengths):
                    packed = pack_padded_sequence(self.embed(tokens), lengths.cpu(), batch_first=True,
                                                  enforce_sorted=False)
                    _, hidden = self.rnn(packed)
                    return hidden[-1]

            model = Encoder().to(device)
            tokens = torch.randint(1, 100, (4, 7)).to(device)
            lengths = torch.tensor([7, 5, 3, 2]).to(device)
            summary = model(tokens, lengths)
            """,
            name="a-forward-that-moves-the-lengths-to-the-cpu-itself",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            class SpeechEncoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.rnn = nn.LSTM(64, 32, batch_first=True, bidirectional=True)

                def forward(self, frames, input_lengths):
                    input_lengths = input_lengths.cpu().numpy()
                    packed = nn.utils.rnn.pack_padded_sequence(frames, input_lengths, batch_first=True)
                    outputs, _ = self.rnn(packed)
                    return nn.utils.rnn.pad_packed_sequence(outputs, batch_first=True)[0]

            class Synthesizer(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embedding = nn.Embedding(40, 64)
                    self.encoder = SpeechEncoder()

                def forward(self, text, text_lengths):
                    return self.encoder(self.embedding(text), text_lengths)

            model = Synthesizer().cuda()
            text = torch.randint(0, 40, (2, 9)).cuda()
            out = model(text, torch.tensor([9, 6]).cuda())
            """,
            name="a-part-that-rebinds-its-lengths-on-the-host",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            class Tagger(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embed = nn.Embedding(100, 16)
                    self.rnn = nn.LSTM(16, 32, batch_first=True)

                def forward(self, tokens, lengths):
                    packed = nn.utils.rnn.pack_padded_sequence(self.embed(tokens), lengths, batch_first=True)
                    output, _ = self.rnn(packed)
                    return nn.utils.rnn.pad_packed_sequence(output, batch_first=True)[0]

            def tag(model, sentences):
                lengths = torch.tensor([len(s) for s in sentences])
                tokens = nn.utils.rnn.pad_sequence([torch.tensor(s) for s in sentences], batch_first=True)
                return model(tokens.to(device), lengths)

            def pack_batch(embedded, lengths):
                return nn.utils.rnn.pack_padded_sequence(embedded, lengths, batch_first=True)
            """,
            name="lengths-kept-on-the-host-and-lengths-of-unknown-place",
        ),
        Valid(
            """
            import torch
            from torch.nn.utils.rnn import pack_padded_sequence
            from captioning.models import AttentionDecoder

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            decoder = AttentionDecoder().to(device)

            def step(features, captions, caption_lengths):
                features, captions = features.to(device), captions.to(device)
                scores, steps_per_caption = decoder(features, captions, caption_lengths)
                packed_scores, _ = pack_padded_sequence(scores, steps_per_caption, batch_first=True)
                return packed_scores
            """,
            name="lengths-a-model-of-another-file-returns",
        ),
        Valid(
            """
            import torch
            import torch.nn as nn
            from torchtext.legacy import data

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            reviews = data.Field(include_lengths=True)

            class Reader(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embed = nn.Embedding(100, 16)
                    self.rnn = nn.LSTM(16, 32)

                def forward(self, text, text_lengths):
                    packed = nn.utils.rnn.pack_padded_sequence(self.embed(text), text_lengths.to("cpu"))
                    _, (hidden, _) = self.rnn(packed)
                    return hidden[-1]

            model = Reader().to(device)
            for batch in data.BucketIterator(train_set, batch_size=32, sort_within_batch=True, device=device):
                text, text_lengths = batch.review
                summary = model(text, text_lengths)
            for batch in data.BucketIterator(test_set, batch_size=32, sort_within_batch=True):
                summary = nn.utils.rnn.pack_padded_sequence(model.embed(batch.review[0]), batch.review[1])
            """,
            name="a-torchtext-model-that-moves-its-lengths-and-an-iterator-without-a-device",
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            import torch.nn as nn

            class Encoder(nn.Module):
                def __init__(self, pad=0):
                    super().__init__()
                    self.pad = pad
                    self.embed = nn.Embedding(100, 16, padding_idx=pad)
                    self.rnn = nn.GRU(16, 32, batch_first=True)

                def forward(self, tokens):
                    lengths = (tokens != self.pad).sum(dim=1)
                    packed = nn.utils.rnn.pack_padded_sequence(self.embed(tokens), lengths, batch_first=True,
                                                               enforce_sorted=False)
                    _, hidden = self.rnn(packed)
                    return hidden[-1]
            """,
            fixed="""
            import torch
            import torch.nn as nn

            class Encoder(nn.Module):
                def __init__(self, pad=0):
                    super().__init__()
                    self.pad = pad
                    self.embed = nn.Embedding(100, 16, padding_idx=pad)
                    self.rnn = nn.GRU(16, 32, batch_first=True)

                def forward(self, tokens):
                    lengths = (tokens != self.pad).sum(dim=1)
                    packed = nn.utils.rnn.pack_padded_sequence(self.embed(tokens), lengths.cpu(), batch_first=True,
                                                               enforce_sorted=False)
                    _, hidden = self.rnn(packed)
                    return hidden[-1]
            """,
            applicability=Applicability.SAFE,
            name="lengths-counted-from-the-padded-batch-in-forward",
            in_docs=True,
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            from torch.nn.utils.rnn import pack_padded_sequence as pack

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            class Classifier(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embed = nn.Embedding(100, 16)
                    self.rnn = nn.LSTM(16, 32, batch_first=True)
                    self.head = nn.Linear(32, 2)

                def forward(self, text, text_lengths):
                    packed = pack(self.embed(text), text_lengths, batch_first=True, enforce_sorted=False)
                    _, (hidden, _) = self.rnn(packed)
                    return self.head(hidden[-1])

            model = Classifier().to(device)
            text = torch.randint(1, 100, (8, 12))
            text_lengths = torch.randint(1, 13, (8,))
            text, text_lengths = text.to(device), text_lengths.to(device)
            logits = model(text, text_lengths)
            again = pack(model.embed(text), lengths=text_lengths + 0, batch_first=True, enforce_sorted=False)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            from torch.nn.utils.rnn import pack_padded_sequence as pack

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            class Classifier(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embed = nn.Embedding(100, 16)
                    self.rnn = nn.LSTM(16, 32, batch_first=True)
                    self.head = nn.Linear(32, 2)

                def forward(self, text, text_lengths):
                    packed = pack(self.embed(text), text_lengths, batch_first=True, enforce_sorted=False)
                    _, (hidden, _) = self.rnn(packed)
                    return self.head(hidden[-1])

            model = Classifier().to(device)
            text = torch.randint(1, 100, (8, 12))
            text_lengths = torch.randint(1, 13, (8,))
            text, text_lengths = text.to(device), text_lengths.to(device)
            logits = model(text, text_lengths.cpu())
            again = pack(model.embed(text), lengths=(text_lengths + 0).cpu(), batch_first=True, enforce_sorted=False)
            """,
            applicability=Applicability.SAFE,
            count=2,
            name="lengths-moved-with-the-batch-and-handed-to-the-model",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn
            from torchtext import data

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            reviews = data.Field(include_lengths=True)
            stars = data.LabelField(dtype=torch.float)
            train_iterator, test_iterator = data.BucketIterator.splits(
                (train_set, test_set), batch_size=32, sort_within_batch=True, device=device)

            class Reader(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embed = nn.Embedding(100, 16)
                    self.rnn = nn.LSTM(16, 32)
                    self.score = nn.Linear(32, 1)

                def forward(self, text, text_lengths):
                    packed = nn.utils.rnn.pack_padded_sequence(self.embed(text), text_lengths)
                    _, (hidden, _) = self.rnn(packed)
                    return self.score(hidden[-1]).squeeze(1)

            model = Reader().to(device)
            for batch in train_iterator:
                text, text_lengths = batch.review
                loss = nn.functional.binary_cross_entropy_with_logits(model(text, text_lengths), batch.stars)
            """,
            fixed="""
            import torch
            import torch.nn as nn
            from torchtext import data

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            reviews = data.Field(include_lengths=True)
            stars = data.LabelField(dtype=torch.float)
            train_iterator, test_iterator = data.BucketIterator.splits(
                (train_set, test_set), batch_size=32, sort_within_batch=True, device=device)

            class Reader(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embed = nn.Embedding(100, 16)
                    self.rnn = nn.LSTM(16, 32)
                    self.score = nn.Linear(32, 1)

                def forward(self, text, text_lengths):
                    packed = nn.utils.rnn.pack_padded_sequence(self.embed(text), text_lengths)
                    _, (hidden, _) = self.rnn(packed)
                    return self.score(hidden[-1]).squeeze(1)

            model = Reader().to(device)
            for batch in train_iterator:
                text, text_lengths = batch.review
                loss = nn.functional.binary_cross_entropy_with_logits(model(text, text_lengths.cpu()), batch.stars)
            """,
            applicability=Applicability.SAFE,
            name="lengths-of-a-torchtext-batch-on-the-device",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            class Encoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embed = nn.Embedding(50, 8)
                    self.gru = nn.GRU(8, 8)

                def forward(self, tokens, lengths):
                    packed = nn.utils.rnn.pack_padded_sequence(self.embed(tokens), lengths)
                    return self.gru(packed)[1]

            def train_step(tokens, lengths, encoder, optimizer):
                optimizer.zero_grad()
                tokens, lengths = tokens.to(device), lengths.to(device)
                encoder(tokens, lengths).sum().backward()
                optimizer.step()

            encoder = Encoder().to(device)
            optimizer = torch.optim.SGD(encoder.parameters(), lr=0.1)
            train_step(torch.randint(0, 50, (6, 2)), torch.tensor([6, 3]), encoder, optimizer)
            """,
            fixed="""
            import torch
            import torch.nn as nn

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            class Encoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.embed = nn.Embedding(50, 8)
                    self.gru = nn.GRU(8, 8)

                def forward(self, tokens, lengths):
                    packed = nn.utils.rnn.pack_padded_sequence(self.embed(tokens), lengths)
                    return self.gru(packed)[1]

            def train_step(tokens, lengths, encoder, optimizer):
                optimizer.zero_grad()
                tokens, lengths = tokens.to(device), lengths.to(device)
                encoder(tokens, lengths.cpu()).sum().backward()
                optimizer.step()

            encoder = Encoder().to(device)
            optimizer = torch.optim.SGD(encoder.parameters(), lr=0.1)
            train_step(torch.randint(0, 50, (6, 2)), torch.tensor([6, 3]), encoder, optimizer)
            """,
            applicability=Applicability.SAFE,
            name="a-training-step-that-moves-the-lengths-it-was-given",
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            class Encoder(nn.Module):
                def __init__(self):
                    super(Encoder, self).__init__()
                    self.embed = nn.Embedding(50, 8)
                    self.gru = nn.GRU(8, 8)

                def forward(self, tokens, lengths):
                    packed = nn.utils.rnn.pack_padded_sequence(self.embed(tokens), lengths)
                    return self.gru(packed)[1]

            class Searcher(nn.Module):
                def __init__(self, encoder):
                    super(Searcher, self).__init__()
                    self.encoder = encoder

                def forward(self, tokens, length):
                    return self.encoder(tokens, length).argmax(-1)

            def reply(searcher, sentence):
                tokens = torch.tensor([sentence]).t().to(device)
                lengths = torch.tensor([len(sentence)]).to(device)
                return searcher(tokens, lengths)

            searcher = Searcher(Encoder().to(device))
            print(reply(searcher, [3, 1, 4]))
            """,
            fixed="""
            import torch
            import torch.nn as nn

            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

            class Encoder(nn.Module):
                def __init__(self):
                    super(Encoder, self).__init__()
                    self.embed = nn.Embedding(50, 8)
                    self.gru = nn.GRU(8, 8)

                def forward(self, tokens, lengths):
                    packed = nn.utils.rnn.pack_padded_sequence(self.embed(tokens), lengths)
                    return self.gru(packed)[1]

            class Searcher(nn.Module):
                def __init__(self, encoder):
                    super(Searcher, self).__init__()
                    self.encoder = encoder

                def forward(self, tokens, length):
                    return self.encoder(tokens, length).argmax(-1)

            def reply(searcher, sentence):
                tokens = torch.tensor([sentence]).t().to(device)
                lengths = torch.tensor([len(sentence)]).to(device)
                return searcher(tokens, lengths.cpu())

            searcher = Searcher(Encoder().to(device))
            print(reply(searcher, [3, 1, 4]))
            """,
            applicability=Applicability.SAFE,
            name="lengths-handed-to-a-wrapper-whose-part-packs-them",
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        if any(arg.star for arg in node.args):
            return
        func = node.func
        handed: list[cst.Arg] = []
        if type(func) is cst.Attribute or type(func) is cst.Name:
            qualified = self.context.names.qualified_name(func, among=torch_api.HOST_REQUIRED_ARGUMENTS)
            wanted = torch_api.HOST_REQUIRED_ARGUMENTS.get(qualified) if qualified is not None else None
            if wanted is not None:
                handed = [arg for position, arg in enumerate(node.args) if torch_api.host_argument(
                    wanted, position, None if arg.keyword is None else arg.keyword.value)]
        if not handed:
            handed = self.context.flow.arguments_forward_needs_on_host(node)
        if not handed:
            return  # most calls: the body's bindings are not looked at
        function = self.context.enclosing_function()
        parameters = set() if function is None else {param.name.value for param in (
            *function.params.posonly_params, *function.params.params, *function.params.kwonly_params)
        } - rebound_parameters(function)
        for arg in handed:
            # A parameter handed on as it is comes from the callers: they are reported (a model's
            # `forward` is taken to get its inputs on its device, its lengths included). One the
            # body moved itself (`lengths = lengths.to(device)`) is the function's own doing.
            if type(arg.value) is cst.Name and arg.value.value in parameters:
                continue
            lengths = self.context.flow.value_of(arg.value)
            if (lengths.is_tensor or lengths.is_placed_data) and lengths.on_accelerator:
                code = self.context.code_for_node(arg.value)
                moved = f"{code}.cpu()" if isinstance(arg.value, _ATOMS) else f"({code}).cpu()"
                self.report(arg.value, fix=self.make_fix(NodeEdit(arg.value, moved)))
