"""What a service asks for that will not happen as written, told when it is applied.

Arguments kiban's huggingface runtime does not know (the runtime logs and drops them, where
nobody looks), named as written in the submitted file (an InferenceService's own paths).
Nothing here imports the runtime's model code: its argument parser is cheap to import.
"""

from __future__ import annotations

from kiban.domain.service import ServiceSubmission
from kiban.serving.runtime.options import unknown_options


def runtime_arg_warnings(submission: ServiceSubmission) -> list[str]:
    """One warning per flag in a huggingface service's args that the runtime does not know."""
    spec = submission.spec
    if spec.runtime != "huggingface":
        return []
    found = []
    for index, flag, close in unknown_options(spec.args):
        path = submission.source_path(f"spec.model.args[{index}]")
        hint = f"; did you mean {close}?" if close else ""
        found.append(
            f"{path}: ignored ({flag} is not an option of kiban's huggingface runtime{hint})"
        )
    return found
