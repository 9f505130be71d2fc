"""Setting any field of a protobuf message by keyword, so that the builders pass through fields
they do not know (ones added to the protos later) with the proto's own names and types:

    set_fields(job_message, num_steps=10, register_memory="REGISTER_MEMORY_SEPARATE",
               initial_state={"path": "/ckpt/a.safetensors", "first_step": 10})

A value may be a message (copied), a dict (merged the way protobuf's JSON parser reads it: nested
fields by name, enums by name or number), a list (of messages, dicts or scalars, for a repeated
field), or a scalar. Enum names are also accepted in lower case ("bfloat16", "gpipe").
"""

from google.protobuf import json_format
from google.protobuf import message as protobuf_message
from google.protobuf.descriptor import FieldDescriptor


class FieldError(ValueError):
    """A field that the message does not have, or a value it cannot hold; names both."""


def _enum_value(field, value, where):
    if isinstance(value, str):
        for candidate in (value, value.upper()):
            enum_value = field.enum_type.values_by_name.get(candidate)
            if enum_value is not None:
                return enum_value.number
        names = ", ".join(field.enum_type.values_by_name)
        raise FieldError(f"{where}: '{value}' is not a value of {field.enum_type.name} ({names})")
    return value


def _convert(field, value, where):
    """A JSON-parser-ready form of VALUE for FIELD (enum names normalised, messages to dicts)."""
    if isinstance(value, protobuf_message.Message):
        return json_format.MessageToDict(value, preserving_proto_field_name=True)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return _enum_value(field, value, where)
    if field.type == FieldDescriptor.TYPE_MESSAGE and isinstance(value, dict) and \
            not field.message_type.GetOptions().map_entry:
        return {key: _convert_nested(field.message_type, key, item, f"{where}.{key}")
                for key, item in value.items()}
    return value


def _convert_nested(descriptor, key, value, where):
    field = descriptor.fields_by_name.get(key) or next(
        (candidate for candidate in descriptor.fields if candidate.json_name == key), None)
    if field is None:
        return value  # the JSON parser names it
    if field.label == FieldDescriptor.LABEL_REPEATED and isinstance(value, (list, tuple)):
        return [_convert(field, item, where) for item in value]
    return _convert(field, value, where)


def set_fields(message, where="", **fields):
    """Sets each keyword as a field of MESSAGE (replacing a repeated field's elements);
    FieldError naming the field (and WHERE, e.g. "op 'h.0.ln_1'") when it is unknown or the
    value does not fit."""
    descriptor = message.DESCRIPTOR
    prefix = f"{where}: " if where else ""
    for key, value in fields.items():
        field = descriptor.fields_by_name.get(key)
        if field is None:
            known = ", ".join(descriptor.fields_by_name)
            raise FieldError(f"{prefix}{descriptor.name} has no field '{key}' (its fields: "
                             f"{known})")
        if value is None:
            message.ClearField(key)
            continue
        label = f"{where or descriptor.name}.{key}"
        if field.label == FieldDescriptor.LABEL_REPEATED and \
                not (field.message_type and field.message_type.GetOptions().map_entry):
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise FieldError(f"{prefix}field '{key}' is repeated: give a list, got {value!r}")
            value = [_convert(field, item, label) for item in value]
        elif isinstance(value, protobuf_message.Message):
            getattr(message, key).CopyFrom(value)
            continue
        else:
            value = _convert(field, value, label)
        try:
            message.ClearField(key)
            json_format.ParseDict({key: value}, message)
        except (json_format.ParseError, TypeError, ValueError) as error:
            raise FieldError(f"{prefix}field '{key}': {error}") from None
    return message
