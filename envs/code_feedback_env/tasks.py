"""Small programming tasks for task mode: a prompt, a function name, and (args, expected) tests.

Expected values are JSON values: the sandboxed child sends the function's return values back as
JSON and the server compares them here, outside the sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    name: str
    function_name: str
    prompt: str
    tests: tuple  # ((args, expected), ...)


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task("add", "add", "Write a Python function `add(a, b)` that returns the sum of a and b.",
             (([1, 2], 3), ([-5, 5], 0), ([10, 32], 42))),
        Task("is_even", "is_even",
             "Write a Python function `is_even(n)` that returns True if n is even, else False.",
             (([2], True), ([7], False), ([0], True), ([-3], False))),
        Task("reverse_string", "reverse_string",
             "Write a Python function `reverse_string(s)` that returns the string s reversed.",
             ((["abc"], "cba"), ([""], ""), (["OpenEnv"], "vnEnepO"))),
        Task("count_vowels", "count_vowels",
             "Write a Python function `count_vowels(s)` that returns how many of the characters "
             "of s are vowels (a, e, i, o, u, either case).",
             ((["hello"], 2), (["xyz"], 0), (["AEIOU"], 5))),
        Task("fizzbuzz", "fizzbuzz",
             "Write a Python function `fizzbuzz(n)` that returns 'FizzBuzz' if n is divisible by "
             "15, 'Fizz' if by 3, 'Buzz' if by 5, and str(n) otherwise.",
             (([3], "Fizz"), ([5], "Buzz"), ([15], "FizzBuzz"), ([7], "7"))),
    )
}

__all__ = ["TASKS", "Task"]
